-- :InfillRewrite: the server rewrites a range and applies the edit itself
-- (workspace/applyEdit, which Neovim's default handler carries out).
local compat = require("infill.compat")

local M = {}

--- The outcome of the last rewrite: { applied = bool, reason = string? } or { error = string }.
M.last_result = nil

-- Offered when the command comes without an instruction; the last one asks for free text.
M.presets = {
  "Make it clearer and more idiomatic without changing what it does.",
  "Add type hints.",
  "Add a docstring and comments.",
  "Make it iterative instead of recursive.",
  "Make it faster.",
  "Something else…",
}

local function run(bufnr, client, range, version, instruction)
  vim.notify("infill: rewriting…", vim.log.levels.INFO)
  M.last_result = nil
  local params = {
    command = "infill.rewrite",
    arguments = {
      { uri = vim.uri_from_bufnr(bufnr), range = range, version = version, instruction = instruction },
    },
  }
  compat.request(client, "workspace/executeCommand", params, function(err, result)
    M.last_result = err and { error = err.message or tostring(err) } or result
    if err then
      vim.notify("infill: rewrite failed: " .. (err.message or tostring(err)), vim.log.levels.ERROR)
    elseif type(result) == "table" and result.applied then
      vim.notify("infill: rewritten", vim.log.levels.INFO)
    else
      -- The server has shown its reason already (window/showMessage); keep it in :messages.
      local reason = type(result) == "table" and result.reason or "nothing was changed"
      vim.notify("infill: " .. tostring(reason), vim.log.levels.WARN)
    end
  end, bufnr)
end

--- Rewrites `range` (LSP range in the client's encoding); asks for the instruction if none.
function M.rewrite(bufnr, client, range, instruction)
  -- The version the range was taken in (what the client told the server): the server refuses
  -- to rewrite once the buffer has changed since, as the range may then hold other code.
  local versions = vim.lsp.util.buf_versions
  local version = versions and versions[bufnr] or nil
  if instruction and instruction ~= "" then
    return run(bufnr, client, range, version, instruction)
  end
  vim.ui.select(M.presets, { prompt = "infill: rewrite how?" }, function(choice, index)
    if not choice then
      return
    end
    if index < #M.presets then
      return run(bufnr, client, range, version, choice)
    end
    vim.ui.input({ prompt = "infill: rewrite how? " }, function(text)
      if text and text ~= "" then
        run(bufnr, client, range, version, text)
      end
    end)
  end)
end

return M
