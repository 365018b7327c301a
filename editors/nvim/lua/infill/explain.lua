-- :InfillExplain: the chat model's explanation, streamed into a floating window.
--
-- The server names each explanation by a progress token that we first learn from its first
-- `infill/explainChunk`; until then the running request is what we can cancel.
local compat = require("infill.compat")
local config = require("infill.config")
local lsp = require("infill.lsp")

local M = {}

---@class infill.Explanation
---@field buf integer the float's buffer
---@field win integer
---@field client_id integer
---@field request_id integer?
---@field token string? the server's progress token, from the first chunk
---@field done boolean
---@field text string
---@field chunks integer how many chunks came

---@type infill.Explanation?
M.current = nil

local function set_title(ex, suffix)
  if not vim.api.nvim_win_is_valid(ex.win) then
    return
  end
  -- A window without a border has no title: then only the buffer variable tells.
  pcall(vim.api.nvim_win_set_config, ex.win, {
    title = " infill: explain" .. suffix .. " ",
    title_pos = "center",
  })
end

local function write(ex, text)
  if not vim.api.nvim_buf_is_valid(ex.buf) then
    return
  end
  local lines = vim.split(text, "\n", { plain = true })
  vim.bo[ex.buf].modifiable = true
  vim.api.nvim_buf_set_lines(ex.buf, 0, -1, false, lines)
  vim.bo[ex.buf].modifiable = false
  if vim.api.nvim_win_is_valid(ex.win) then
    -- Follow the text as it grows, like a terminal.
    vim.api.nvim_win_set_cursor(ex.win, { #lines, 0 })
  end
end

local function finish(ex, how)
  if ex.done then
    return
  end
  ex.done = true
  ex.request_id = nil
  vim.b[ex.buf].infill_explain_done = how
  set_title(ex, " (" .. how .. ")")
end

--- Stops the running explanation (the model stops within a token); keeps what came.
function M.stop()
  local ex = M.current
  if not ex or ex.done then
    return
  end
  local client = vim.lsp.get_client_by_id(ex.client_id)
  if client and not compat.is_stopped(client) then
    if ex.token then
      compat.notify(client, "window/workDoneProgress/cancel", { token = ex.token })
    elseif ex.request_id then
      compat.cancel(client, ex.request_id)
    end
  end
  finish(ex, "stopped")
end

local function close(ex)
  if M.current == ex then
    M.stop()
    M.current = nil
  end
  if vim.api.nvim_win_is_valid(ex.win) then
    vim.api.nvim_win_close(ex.win, true)
  end
end

local function open_window()
  local opts = config.options.explain
  local width = math.max(20, math.floor(vim.o.columns * opts.width))
  local height = math.max(5, math.floor((vim.o.lines - 2) * opts.height))
  local buf = vim.api.nvim_create_buf(false, true)
  vim.bo[buf].bufhidden = "wipe"
  vim.bo[buf].filetype = "markdown"
  local win = vim.api.nvim_open_win(buf, true, {
    relative = "editor",
    width = width,
    height = height,
    row = math.floor((vim.o.lines - height) / 2) - 1,
    col = math.floor((vim.o.columns - width) / 2),
    style = "minimal",
    border = opts.border,
  })
  vim.wo[win].wrap = true
  vim.wo[win].linebreak = true
  vim.wo[win].conceallevel = 2
  return buf, win
end

--- Explains `range` (LSP range in the client's encoding; empty means the enclosing block).
function M.explain(bufnr, client, range)
  if M.current then
    close(M.current)
  end
  local buf, win = open_window()
  local ex = { buf = buf, win = win, client_id = client.id, done = false, text = "", chunks = 0 }
  M.current = ex
  vim.b[buf].infill_explain_done = false
  write(ex, "_Thinking…_")
  set_title(ex, " (running)")
  local map = function(lhs, fn)
    vim.keymap.set("n", lhs, fn, { buffer = buf, nowait = true, desc = "infill explain" })
  end
  map("q", function()
    close(ex)
  end)
  map("<C-c>", M.stop)
  vim.api.nvim_create_autocmd("WinClosed", {
    pattern = tostring(win),
    once = true,
    callback = function()
      if M.current == ex then
        M.stop()
        M.current = nil
      end
    end,
  })

  local params = {
    command = "infill.explain",
    arguments = { { uri = vim.uri_from_bufnr(bufnr), range = range } },
  }
  ex.request_id = compat.request(client, "workspace/executeCommand", params, function(err, result)
    if err then
      local so_far = ex.text ~= "" and ex.text .. "\n\n" or ""
      write(ex, so_far .. "**infill:** " .. (err.message or tostring(err)))
      finish(ex, "failed")
      return
    end
    -- The result is the whole answer: it wins over the chunks if they were cut short.
    if type(result) == "string" and result ~= "" and not (ex.done and ex.text ~= "") then
      ex.text = result
      write(ex, result)
    end
    finish(ex, "done")
  end, bufnr)
  if not ex.request_id then
    write(ex, "**infill:** the server is not running")
    finish(ex, "failed")
  end
  return ex
end

--- `infill/explainChunk` {token, text, done}: goes to the explanation that owns the token, or
--- to the one that has not heard from the server yet.
function M.on_chunk(_, params)
  local ex = M.current
  if not ex or type(params) ~= "table" then
    return
  end
  if ex.token == nil then
    ex.token = params.token
  elseif ex.token ~= params.token then
    return -- a chunk of an explanation that was closed
  end
  if ex.done then
    return
  end
  ex.chunks = ex.chunks + 1
  if params.text and params.text ~= "" then
    ex.text = ex.text .. params.text
    write(ex, ex.text)
  end
  if params.done then
    finish(ex, "done")
  end
end

lsp.handlers["infill/explainChunk"] = M.on_chunk

return M
