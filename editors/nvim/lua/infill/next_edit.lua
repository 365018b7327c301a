-- Next edits: the server's proposals for the user's next change (the same rename at the other
-- uses, ...), asked for in normal mode and drawn with extmarks.
--
-- One state per buffer. Edits belong to the buffer version they were asked for: applying
-- checks that version first, and anything the user does to the buffer (typing, insert mode,
-- moving away) dismisses them, telling the server (`infill/didRejectNextEdit`).
local compat = require("infill.compat")
local config = require("infill.config")
local lsp = require("infill.lsp")

local M = {}

M.ns = vim.api.nvim_create_namespace("infill_next_edit")
M.REQUEST = "textDocument/copilotInlineEdit"
--- The last error a next-edit request got (nil if none yet).
M.last_error = nil

local states, state_of = lsp.buffer_states()
local cursor = lsp.cursor

local function in_normal_mode()
  return vim.api.nvim_get_mode().mode == "n"
end

--- The version of the buffer that the client last sent the server (the edits are about it).
local function sent_version(bufnr)
  local versions = vim.lsp.util.buf_versions
  return versions and versions[bufnr] or vim.b[bufnr].changedtick
end

--- Whether the server offers next edits (an `experimental` capability).
function M.supported(client)
  local experimental = client and client.server_capabilities.experimental
  return type(experimental) == "table" and experimental.nextEditSuggestions ~= nil
end

local stop_timer, cancel_pending = lsp.stop_timer, lsp.cancel_pending

--- The id the server gave an edit (its command's argument), or nil.
local function id_of(edit)
  local args = edit.raw.command and edit.raw.command.arguments
  return type(args) == "table" and args[1] or nil
end

--- Removes the shown edits and stops any request; `rejected` tells the server the user
--- turned them down.
function M.clear(bufnr, rejected)
  bufnr = bufnr or vim.api.nvim_get_current_buf()
  local s = states[bufnr]
  if not s then
    return
  end
  stop_timer(s)
  cancel_pending(s)
  local shown = s.shown
  s.shown = nil
  if vim.api.nvim_buf_is_valid(bufnr) then
    vim.api.nvim_buf_clear_namespace(bufnr, M.ns, 0, -1)
  end
  if rejected and shown then
    local client = vim.lsp.get_client_by_id(shown.client_id)
    if client and not compat.is_stopped(client) then
      for _, edit in ipairs(shown.edits) do
        local id = id_of(edit)
        if id ~= nil then
          compat.notify(client, "infill/didRejectNextEdit", { id = id })
        end
      end
    end
  end
end

--- Dismisses the shown edits (the user turned them down).
function M.dismiss(bufnr)
  M.clear(bufnr, true)
end

-- Drawing ---------------------------------------------------------------------------------------

local function expand_tabs(bufnr, text)
  local width = vim.bo[bufnr].tabstop > 0 and vim.bo[bufnr].tabstop or 8
  return (text:gsub("\t", string.rep(" ", width)))
end

--- Draws one edit: the replaced range in InfillNextEditDelete, the new text after it in
--- InfillNextEditInsert (its first line inline, further lines as virtual lines), a sign.
local function draw(bufnr, edit)
  local lines = vim.split(edit.raw.text, "\n", { plain = true })
  local srow, scol, erow, ecol = edit.start[1], edit.start[2], edit.stop[1], edit.stop[2]
  if erow > srow or ecol > scol then
    vim.api.nvim_buf_set_extmark(bufnr, M.ns, srow, scol, {
      end_row = erow,
      end_col = ecol,
      hl_group = "InfillNextEditDelete",
    })
  end
  local mark = { sign_text = "»", sign_hl_group = "InfillNextEditSign", hl_mode = "combine" }
  if lines[1] ~= "" then
    mark.virt_text = { { lines[1], "InfillNextEditInsert" } }
    mark.virt_text_pos = "inline"
  end
  if #lines > 1 then
    local extra = {}
    for i = 2, #lines do
      extra[#extra + 1] = { { expand_tabs(bufnr, lines[i]), "InfillNextEditInsert" } }
    end
    mark.virt_lines = extra
  end
  vim.api.nvim_buf_set_extmark(bufnr, M.ns, erow, ecol, mark)
end

local function show(bufnr, client, edits, tick, version)
  local s = state_of(bufnr)
  vim.api.nvim_buf_clear_namespace(bufnr, M.ns, 0, -1)
  s.shown = nil
  if #edits == 0 then
    return
  end
  for _, edit in ipairs(edits) do
    draw(bufnr, edit)
    compat.notify(client, "textDocument/didShowInlineEdit", { item = edit.raw })
  end
  local row, col = cursor()
  s.shown = {
    edits = edits,
    client_id = client.id,
    tick = tick,
    version = version,
    -- Cursor places that keep the edits on show: where they were asked for, and each edit's
    -- start (where the accept key jumps).
    stays = { [row .. ":" .. col] = true },
  }
  for _, edit in ipairs(edits) do
    s.shown.stays[edit.start[1] .. ":" .. edit.start[2]] = true
  end
end

--- The shown edits of the buffer, or nil: a list of { text, start = {row, col}, stop = {row,
--- col}, id } (0-based rows, byte columns), for tests and statuslines.
function M.current(bufnr)
  local s = states[bufnr or vim.api.nvim_get_current_buf()]
  if not (s and s.shown) then
    return nil
  end
  local out = {}
  for _, edit in ipairs(s.shown.edits) do
    out[#out + 1] = { text = edit.raw.text, start = edit.start, stop = edit.stop, id = id_of(edit) }
  end
  return out
end

function M.visible(bufnr)
  return M.current(bufnr) ~= nil
end

-- Requests --------------------------------------------------------------------------------------

local function to_edits(client, bufnr, result, uri, version)
  local edits = {}
  for _, raw in ipairs(type(result) == "table" and result.edits or {}) do
    local doc = raw.textDocument or {}
    if type(raw.text) == "string" and raw.range and doc.uri == uri and doc.version == version then
      edits[#edits + 1] = {
        raw = raw,
        start = { lsp.from_lsp(client, bufnr, raw.range.start) },
        stop = { lsp.from_lsp(client, bufnr, raw.range["end"]) },
      }
    end
  end
  table.sort(edits, function(a, b)
    return a.start[1] < b.start[1] or (a.start[1] == b.start[1] and a.start[2] < b.start[2])
  end)
  return edits
end

--- Asks the server for next edits at the cursor; shows them if the answer is still about
--- the buffer and cursor of now, in normal mode.
function M.request(bufnr)
  local client = lsp.get_client(bufnr)
  if not M.supported(client) then
    return
  end
  local s = state_of(bufnr)
  cancel_pending(s)
  s.seq = s.seq + 1
  local seq = s.seq
  local row, col = cursor()
  local tick = vim.b[bufnr].changedtick
  local uri = vim.uri_from_bufnr(bufnr)
  -- Sending the request first flushes the pending didChange, so the version is read after.
  local params = { textDocument = { uri = uri }, position = lsp.to_lsp(client, bufnr, row, col) }
  local id = compat.request(client, M.REQUEST, params, function(err, result)
    if s.seq ~= seq then
      return -- a newer request was made meanwhile
    end
    s.pending = nil
    if err then
      M.last_error = err
      return
    end
    if not vim.api.nvim_buf_is_valid(bufnr) or vim.api.nvim_get_current_buf() ~= bufnr then
      return
    end
    local now_row, now_col = cursor()
    if vim.b[bufnr].changedtick ~= tick or now_row ~= row or now_col ~= col then
      return -- stale: the event that moved on asks again (or dismisses)
    end
    if not in_normal_mode() then
      return
    end
    local version = sent_version(bufnr)
    show(bufnr, client, to_edits(client, bufnr, result, uri, version), tick, version)
  end, bufnr)
  if id then
    s.pending = { id = id, client_id = client.id }
  end
end

--- Requests next edits after the debounce.
function M.schedule(bufnr)
  local s = state_of(bufnr)
  stop_timer(s)
  if not config.options.next_edits then
    return
  end
  lsp.debounce(s, config.options.debounce_ms, function()
    if vim.api.nvim_get_current_buf() == bufnr and in_normal_mode() then
      M.request(bufnr)
    end
  end)
end

-- Accepting -------------------------------------------------------------------------------------

local function contains(edit, row, col)
  local after_start = row > edit.start[1] or (row == edit.start[1] and col >= edit.start[2])
  local before_end = row < edit.stop[1] or (row == edit.stop[1] and col <= edit.stop[2])
  return after_start and before_end
end

--- The edit nearest the cursor (by rows, then columns).
local function nearest(edits, row, col)
  local best, best_key
  for _, edit in ipairs(edits) do
    local key = math.abs(edit.start[1] - row) * 1e6 + math.abs(edit.start[2] - col)
    if not best_key or key < best_key then
      best, best_key = edit, key
    end
  end
  return best
end

--- The accept key: with the cursor away from every shown edit, jumps to the nearest one;
--- on one, applies all the buffer's shown edits as one undo step, then runs each edit's
--- command. Returns false when no edit shows.
function M.accept(bufnr)
  bufnr = bufnr or vim.api.nvim_get_current_buf()
  local s = states[bufnr]
  if not (s and s.shown) then
    return false
  end
  local shown = s.shown
  local row, col = cursor()
  local on_one = false
  for _, edit in ipairs(shown.edits) do
    on_one = on_one or contains(edit, row, col)
  end
  if not on_one then
    local target = nearest(shown.edits, row, col)
    vim.api.nvim_win_set_cursor(0, { target.start[1] + 1, target.start[2] })
    return true
  end
  local client = vim.lsp.get_client_by_id(shown.client_id)
  M.clear(bufnr)
  if vim.b[bufnr].changedtick ~= shown.tick or sent_version(bufnr) ~= shown.version then
    return true -- the buffer moved on since: the edits are about text that is gone
  end
  if not client or compat.is_stopped(client) then
    return true
  end
  local text_edits = {}
  for _, edit in ipairs(shown.edits) do
    text_edits[#text_edits + 1] = { range = edit.raw.range, newText = edit.raw.text }
  end
  -- One call, inside one key's command: `u` takes back all of the edits at once.
  vim.lsp.util.apply_text_edits(text_edits, bufnr, client.offset_encoding)
  for _, edit in ipairs(shown.edits) do
    if edit.raw.command then
      compat.exec_cmd(client, edit.raw.command, bufnr)
    end
  end
  return true
end

-- Events ----------------------------------------------------------------------------------------

local function on_cursor_moved(bufnr)
  local s = states[bufnr]
  if not (s and s.shown) then
    return
  end
  local row, col = cursor()
  if not s.shown.stays[row .. ":" .. col] then
    M.dismiss(bufnr)
  end
end

function M.attach(bufnr)
  local group = lsp.attach_once(bufnr, "next_edit")
  if not group then
    return
  end
  -- Leaving insert mode and changing text in normal mode ask (debounced); typing dismisses.
  vim.api.nvim_create_autocmd({ "InsertLeave", "TextChanged" }, {
    group = group,
    buffer = bufnr,
    callback = function()
      M.dismiss(bufnr)
      M.schedule(bufnr)
    end,
  })
  vim.api.nvim_create_autocmd({ "InsertEnter", "BufLeave" }, {
    group = group,
    buffer = bufnr,
    callback = function()
      M.dismiss(bufnr)
    end,
  })
  vim.api.nvim_create_autocmd("CursorMoved", {
    group = group,
    buffer = bufnr,
    callback = function()
      on_cursor_moved(bufnr)
    end,
  })
  lsp.on_detach(bufnr, group, function()
    M.clear(bufnr)
    states[bufnr] = nil
    vim.b[bufnr].infill_next_edit_attached = nil
  end)
end

return M
