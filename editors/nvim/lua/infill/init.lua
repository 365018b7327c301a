-- infill-lsp for Neovim: ghost-text completions, Explain and Rewrite from a local model.
--
--   require("infill").setup({ cmd = { "/path/to/.venv/bin/infill-lsp" } })
local compat = require("infill.compat")
local config = require("infill.config")
local lsp = require("infill.lsp")
local ghost = require("infill.ghost")
local next_edit = require("infill.next_edit")

local M = {}

local function set_highlight()
  -- `default` keeps a colorscheme's own InfillSuggestion.
  vim.api.nvim_set_hl(0, "InfillSuggestion", { link = "Comment", default = true })
  -- Next edits: the text they replace, the text they put there, the sign on their line.
  vim.api.nvim_set_hl(0, "InfillNextEditDelete", { link = "DiffDelete", default = true })
  vim.api.nvim_set_hl(0, "InfillNextEditInsert", { link = "DiffAdd", default = true })
  vim.api.nvim_set_hl(0, "InfillNextEditSign", { link = "DiagnosticSignHint", default = true })
end

local function use_builtin()
  return config.options.builtin_inline_completion and compat.builtin_inline_completion() ~= nil
end

-- Keymaps ---------------------------------------------------------------------------------------

--- A key for Neovim 0.12's own inline completion: only accepting has a meaning there.
local function builtin_key(lhs, action)
  if action == "accept" then
    -- get() accepts the shown item (scheduled, so an expression mapping may call it) and
    -- says whether there was one.
    local ok, accepted = pcall(vim.lsp.inline_completion.get)
    if ok and accepted then
      return ""
    end
  end
  return lhs
end

--- An insert-mode key that acts only while a suggestion shows and else types itself.
local function map_when_visible(lhs, action, desc)
  vim.keymap.set("i", lhs, function()
    if use_builtin() then
      return builtin_key(lhs, action)
    end
    if ghost.visible() then
      -- An expression mapping may not change the buffer (textlock): run it as a command.
      return "<Cmd>lua require('infill')." .. action .. "()<CR>"
    end
    return lhs
  end, { expr = true, silent = true, desc = desc })
end

local function map_always(lhs, action, desc)
  vim.keymap.set("i", lhs, function()
    M[action]()
  end, { silent = true, desc = desc })
end

--- The keymaps, in the order they are set: the action (a key of the `keymaps` option and a
--- function of this module), whether it acts only while a suggestion shows, and its description.
local KEYMAPS = {
  { "accept", true, "infill: accept the suggestion" },
  { "accept_word", true, "infill: accept a word" },
  { "accept_line", true, "infill: accept a line" },
  { "next", false, "infill: next suggestion" },
  { "prev", false, "infill: previous suggestion" },
  { "dismiss", true, "infill: dismiss the suggestion" },
}

--- A normal-mode key that acts only while next edits show and else does what it always does.
local function map_next_edit(lhs, action, desc)
  vim.keymap.set("n", lhs, function()
    if next_edit.visible() then
      return "<Cmd>lua require('infill')." .. action .. "()<CR>"
    end
    return lhs
  end, { expr = true, silent = true, desc = desc })
end

local function set_keymaps()
  local keys = config.options.keymaps or {}
  if keys.next_edit_accept then
    map_next_edit(keys.next_edit_accept, "next_edit_accept", "infill: jump to / apply next edits")
  end
  if keys.next_edit_dismiss then
    map_next_edit(keys.next_edit_dismiss, "next_edit_dismiss", "infill: dismiss next edits")
  end
  for _, keymap in ipairs(KEYMAPS) do
    local action, when_visible, desc = keymap[1], keymap[2], keymap[3]
    local lhs = keys[action]
    if lhs then
      if when_visible then
        map_when_visible(lhs, action, desc)
      else
        map_always(lhs, action, desc)
      end
    end
  end
end

-- Public API ------------------------------------------------------------------------------------

function M.accept()
  return ghost.accept()
end

function M.accept_word()
  return ghost.accept_word()
end

function M.accept_line()
  return ghost.accept_line()
end

function M.next()
  if use_builtin() then
    pcall(vim.lsp.inline_completion.select, { count = 1 })
    return
  end
  ghost.next()
end

function M.prev()
  if use_builtin() then
    pcall(vim.lsp.inline_completion.select, { count = -1 })
    return
  end
  ghost.prev()
end

function M.dismiss()
  ghost.clear()
end

--- With the cursor away from the shown next edits, jumps to the nearest; on one, applies
--- them all (one undo step). False when none shows.
function M.next_edit_accept()
  return next_edit.accept()
end

function M.next_edit_dismiss()
  next_edit.dismiss()
end

--- The shown next edits of the current buffer, or nil: a list of { text, start, stop, id }
--- (0-based rows, byte columns).
function M.next_edits()
  return next_edit.current()
end

--- The visible suggestion of the current buffer, or nil (for tests and statuslines).
function M.suggestion()
  return ghost.current()
end

function M.toggle(on)
  if on == nil then
    on = not ghost.enabled
  end
  ghost.set_enabled(on)
  if use_builtin() then
    pcall(vim.lsp.inline_completion.enable, on)
  end
  vim.notify("infill: automatic suggestions " .. (on and "on" or "off"), vim.log.levels.INFO)
  return on
end

--- Changes server settings at run time (merged over the current ones).
function M.set_settings(settings)
  config.options.settings = vim.tbl_deep_extend("force", config.options.settings or {}, settings)
  lsp.send_settings()
end

--- `infill/status` of the running server, synchronously (nil and a reason if none).
function M.status(timeout_ms)
  local client = lsp.get_client() or lsp.any_client()
  if not client then
    return nil, "no infill-lsp client is running"
  end
  local params = vim.empty_dict()
  local res, err = compat.request_sync(client, "infill/status", params, timeout_ms or 2000)
  if not res then
    return nil, err or "no answer"
  end
  if res.err then
    return nil, res.err.message
  end
  return res.result
end

function M.print_status()
  local status, err = M.status()
  if not status then
    vim.notify("infill: " .. err, vim.log.levels.WARN)
    return
  end
  local line = string.format(
    "infill: %s (%s, %s on %s, context %s, FIM %s)",
    status.status,
    status.model or "?",
    status.backend or "?",
    status.device or "?",
    tostring(status.context_size or "?"),
    tostring(status.fim_family or "none")
  )
  if status.last_error and status.last_error ~= vim.NIL then
    line = line .. "; last error: " .. tostring(status.last_error)
  end
  vim.notify(line, vim.log.levels.INFO)
  return status
end

-- Ranges for :InfillExplain and :InfillRewrite --------------------------------------------------

--- The command's range as an LSP range: a charwise visual selection exactly, a line range
--- as whole lines, no range as the cursor (the server takes the enclosing block).
local function command_range(client, bufnr, cmd)
  if not cmd or cmd.range == 0 then
    local row, col = unpack(vim.api.nvim_win_get_cursor(0))
    local pos = lsp.to_lsp(client, bufnr, row - 1, col)
    return { start = pos, ["end"] = pos }
  end
  local first, last = cmd.line1 - 1, cmd.line2 - 1
  local vstart, vend = vim.api.nvim_buf_get_mark(bufnr, "<"), vim.api.nvim_buf_get_mark(bufnr, ">")
  if vim.fn.visualmode() == "v" and vstart[1] - 1 == first and vend[1] - 1 == last then
    local line = vim.api.nvim_buf_get_lines(bufnr, last, last + 1, false)[1] or ""
    -- '> is the last selected character's first byte: include all of its bytes.
    local end_col = math.min(#line, vend[2] + #vim.fn.strcharpart(line:sub(vend[2] + 1), 0, 1))
    return {
      start = lsp.to_lsp(client, bufnr, first, vstart[2]),
      ["end"] = lsp.to_lsp(client, bufnr, last, math.max(end_col, 0)),
    }
  end
  local last_line = vim.api.nvim_buf_get_lines(bufnr, last, last + 1, false)[1] or ""
  return {
    start = { line = first, character = 0 },
    ["end"] = lsp.to_lsp(client, bufnr, last, #last_line),
  }
end

local function client_or_warn(bufnr)
  local client = lsp.get_client(bufnr)
  if not client then
    vim.notify("infill: no infill-lsp client for this buffer", vim.log.levels.WARN)
  end
  return client
end

--- :InfillExplain; `cmd` is the user command's argument table (range, line1, line2).
function M.explain(cmd)
  local bufnr = vim.api.nvim_get_current_buf()
  local client = client_or_warn(bufnr)
  if client then
    return require("infill.explain").explain(bufnr, client, command_range(client, bufnr, cmd))
  end
end

function M.stop()
  require("infill.explain").stop()
end

--- :InfillRewrite {instruction}
function M.rewrite(cmd)
  local bufnr = vim.api.nvim_get_current_buf()
  local client = client_or_warn(bufnr)
  if client then
    local instruction = cmd and cmd.args or nil
    require("infill.rewrite").rewrite(bufnr, client, command_range(client, bufnr, cmd), instruction)
  end
end

-- Setup -----------------------------------------------------------------------------------------

function M.setup(opts)
  config.apply(opts)
  require("infill.explain") -- registers its notification handler before the client starts
  set_highlight()
  set_keymaps()
  local group = vim.api.nvim_create_augroup("infill", { clear = true })
  vim.api.nvim_create_autocmd("ColorScheme", { group = group, callback = set_highlight })
  vim.api.nvim_create_autocmd("FileType", {
    group = group,
    callback = function(ev)
      lsp.start(ev.buf)
    end,
  })
  vim.api.nvim_create_autocmd("LspAttach", {
    group = group,
    callback = function(ev)
      local client = vim.lsp.get_client_by_id(ev.data.client_id)
      if not (client and client.name == lsp.name) then
        return
      end
      if use_builtin() then
        pcall(vim.lsp.inline_completion.enable, ghost.enabled, { bufnr = ev.buf })
      else
        ghost.attach(ev.buf)
      end
      if next_edit.supported(client) then
        next_edit.attach(ev.buf)
      end
    end,
  })
  -- Buffers opened before setup() (a plugin manager loading us late).
  for _, bufnr in ipairs(vim.api.nvim_list_bufs()) do
    if vim.api.nvim_buf_is_loaded(bufnr) and vim.bo[bufnr].filetype ~= "" then
      lsp.start(bufnr)
    end
  end
end

return M
