-- Starting the infill-lsp client and finding it again; LSP positions in its encoding.
local compat = require("infill.compat")
local config = require("infill.config")

local M = {}

M.name = "infill"

-- Notification handlers that other modules register (infill/explainChunk, ...). They go in
-- the client's own `handlers` table so that they apply to this server only.
M.handlers = {}

--- Per-buffer request state: the table of states by buffer, and `state_of(bufnr)`, which
--- makes a buffer's on first use.
function M.buffer_states()
  ---@type table<integer, table>
  local states = {}
  local function state_of(bufnr)
    local s = states[bufnr]
    if not s then
      s = { seq = 0 }
      states[bufnr] = s
    end
    return s
  end
  return states, state_of
end

--- The buffer's autocommand group for `feature` ("ghost", "next_edit") the first time it is
--- asked for, marking the buffer (`b:infill_<feature>_attached`); nil once it is attached.
function M.attach_once(bufnr, feature)
  local flag = "infill_" .. feature .. "_attached"
  if vim.b[bufnr][flag] then
    return nil
  end
  vim.b[bufnr][flag] = true
  return vim.api.nvim_create_augroup("infill_" .. feature .. "_" .. bufnr, { clear = true })
end

--- Runs `forget` when the buffer unloads or our client leaves it (not another client), then
--- deletes the buffer's autocommand group `group`.
function M.on_detach(bufnr, group, forget)
  vim.api.nvim_create_autocmd({ "BufUnload", "LspDetach" }, {
    group = group,
    buffer = bufnr,
    callback = function(ev)
      if ev.event == "LspDetach" and ev.data and ev.data.client_id then
        local client = vim.lsp.get_client_by_id(ev.data.client_id)
        if client and client.name ~= M.name then
          return
        end
      end
      forget()
      pcall(vim.api.nvim_del_augroup_by_id, group)
    end,
  })
end

--- The cursor as a 0-based row and a byte column.
function M.cursor()
  local pos = vim.api.nvim_win_get_cursor(0)
  return pos[1] - 1, pos[2]
end

-- A buffer's request state (`s.timer`: the debounce, `s.pending`: the request in flight, as
-- {client_id, id}), shared by inline suggestions and next edits.
function M.stop_timer(s)
  if s.timer then
    s.timer:stop()
    s.timer:close()
    s.timer = nil
  end
end

--- Runs `fn` on the main loop once `ms` pass without another call for the same state `s`
--- (a newer call, or `stop_timer`, drops the older one).
function M.debounce(s, ms, fn)
  M.stop_timer(s)
  local timer = compat.uv.new_timer()
  s.timer = timer
  timer:start(ms, 0, vim.schedule_wrap(function()
    if s.timer ~= timer then
      return
    end
    M.stop_timer(s)
    fn()
  end))
end

function M.cancel_pending(s)
  if s.pending then
    local client = vim.lsp.get_client_by_id(s.pending.client_id)
    if client and not compat.is_stopped(client) then
      compat.cancel(client, s.pending.id)
    end
    s.pending = nil
  end
end

function M.get_client(bufnr)
  bufnr = bufnr or vim.api.nvim_get_current_buf()
  return vim.lsp.get_clients({ bufnr = bufnr, name = M.name })[1]
end

--- Any running infill client (commands that do not need a buffer, such as :InfillStatus).
function M.any_client()
  return vim.lsp.get_clients({ name = M.name })[1]
end

local function wants(bufnr)
  if not vim.api.nvim_buf_is_valid(bufnr) or vim.bo[bufnr].buftype ~= "" then
    return false
  end
  if vim.api.nvim_buf_get_name(bufnr) == "" then
    return false -- an LSP document needs a file URI
  end
  local fts = config.options.filetypes
  if fts == nil or fts == "*" or (type(fts) == "table" and vim.tbl_contains(fts, "*")) then
    return vim.bo[bufnr].filetype ~= ""
  end
  return vim.tbl_contains(fts, vim.bo[bufnr].filetype)
end

local function root_of(bufnr)
  local root = vim.fs.root and vim.fs.root(bufnr, config.options.root_markers)
  return root or vim.fs.dirname(vim.api.nvim_buf_get_name(bufnr))
end

local function settings_section()
  local settings = config.options.settings or {}
  -- An empty Lua table would go out as a JSON array.
  return { infill = next(settings) and settings or vim.empty_dict() }
end

--- Starts the server for the buffer (or attaches the running one); returns the client id.
function M.start(bufnr)
  if not wants(bufnr) then
    return nil
  end
  local opts = config.options
  local capabilities = vim.lsp.protocol.make_client_capabilities()
  -- The plugin shows suggestions as ghost text: declaring inline completion keeps the server
  -- from also putting them in a completion menu (nvim-cmp or blink.cmp would show them twice).
  capabilities.textDocument = capabilities.textDocument or {}
  capabilities.textDocument.inlineCompletion = capabilities.textDocument.inlineCompletion
    or { dynamicRegistration = false }
  if opts.position_encodings then
    capabilities.general = capabilities.general or {}
    capabilities.general.positionEncodings = opts.position_encodings
  end
  return vim.lsp.start({
    name = M.name,
    cmd = opts.cmd,
    root_dir = root_of(bufnr),
    init_options = settings_section(),
    capabilities = capabilities,
    handlers = M.handlers,
  }, {
    bufnr = bufnr,
    -- One server for every project: each one would load its own copy of the models.
    reuse_client = function(client, conf)
      return client.name == conf.name and not compat.is_stopped(client)
    end,
  })
end

--- Sends changed settings to the running server (workspace/didChangeConfiguration).
function M.send_settings()
  local section = settings_section()
  for _, client in ipairs(vim.lsp.get_clients({ name = M.name })) do
    compat.notify(client, "workspace/didChangeConfiguration", { settings = section })
  end
end

-- Positions ------------------------------------------------------------------------------------

local function line_text(bufnr, row)
  return vim.api.nvim_buf_get_lines(bufnr, row, row + 1, false)[1] or ""
end

--- LSP position of a 0-based (row, byte column), in the client's encoding.
function M.to_lsp(client, bufnr, row, col)
  local line = line_text(bufnr, row)
  return { line = row, character = compat.units_of_byte(line, col, client.offset_encoding) }
end

--- 0-based (row, byte column) of an LSP position, in the client's encoding.
function M.from_lsp(client, bufnr, pos)
  local line = line_text(bufnr, pos.line)
  return pos.line, compat.byte_of_units(line, pos.character, client.offset_encoding)
end

return M
