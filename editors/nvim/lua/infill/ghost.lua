-- Ghost text: inline suggestions requested while typing and drawn with extmarks.
--
-- One state per buffer. A suggestion belongs to the buffer state it was asked for
-- (changedtick and cursor); anything else that happens to the buffer clears it, and a late
-- answer for an older state is dropped.
local compat = require("infill.compat")
local config = require("infill.config")
local lsp = require("infill.lsp")

local M = {}

M.ns = vim.api.nvim_create_namespace("infill_ghost")
M.enabled = true
--- The last error a suggestion request got (nil if none yet).
M.last_error = nil
--- The last answer that reached the buffer, about the state it was asked for: { bufnr, invoked,
--- count, tick, row, col } (0-based row/col; nil if none yet). An invoked request that finds
--- nothing says so (a message); this keeps it for tests.
M.last_answer = nil
--- Set to a table to have each step of the requests appended to it, as lines (tests and bug
--- reports: what was asked, what came back, what was dropped and why).
M.trace = nil

local function note(fmt, ...)
  if M.trace then
    local pos = vim.api.nvim_win_get_cursor(0)
    local head = string.format("%d ms %s (%d,%d) tick %d: ", math.floor(compat.uv.hrtime() / 1e6),
      vim.api.nvim_get_mode().mode, pos[1], pos[2], vim.b.changedtick)
    M.trace[#M.trace + 1] = head .. string.format(fmt, ...)
  end
end

local INVOKED, AUTOMATIC = 1, 2

---@class infill.Item
---@field text string the whole insert text
---@field start integer[] 0-based {row, byte col} where it replaces from
---@field stop integer[] 0-based {row, byte col} where the replaced range ends
---@field raw table the item as the server sent it (sent back in the notices about it)
---@field told_shown boolean? whether the server was told it showed

-- Usage counts (`infill.usageCounts`, kept by the server on this machine): an item the server
-- counts carries its accept command; the server is told when it is drawn, when part of it is
-- taken (as Copilot's clients do), and the command runs when all of it is.
local ACCEPT_COMMAND = "infill.acceptCompletion"

local function counted(item)
  local command = item.raw and item.raw.command
  return type(command) == "table" and command.command == ACCEPT_COMMAND
end

local function tell(bufnr, method, params)
  local client = lsp.get_client(bufnr)
  if client then
    compat.notify(client, method, params)
  end
end

local states, state_of = lsp.buffer_states()
local cursor = lsp.cursor

local function in_insert_mode()
  local mode = vim.api.nvim_get_mode().mode
  return mode:sub(1, 1) == "i" or mode:sub(1, 1) == "R"
end

local stop_timer, cancel_pending = lsp.stop_timer, lsp.cancel_pending

--- Removes the suggestion and stops any request for it.
function M.clear(bufnr)
  bufnr = bufnr or vim.api.nvim_get_current_buf()
  local s = states[bufnr]
  if not s then
    return
  end
  stop_timer(s)
  cancel_pending(s)
  s.items, s.index, s.shown = nil, nil, nil
  if vim.api.nvim_buf_is_valid(bufnr) then
    vim.api.nvim_buf_clear_namespace(bufnr, M.ns, 0, -1)
  end
end

-- Text ------------------------------------------------------------------------------------------

local function buf_text(bufnr, srow, scol, erow, ecol)
  if erow < srow or (erow == srow and ecol <= scol) then
    return ""
  end
  local ok, lines = pcall(vim.api.nvim_buf_get_text, bufnr, srow, scol, erow, ecol, {})
  return ok and table.concat(lines, "\n") or nil
end

--- What a suggestion adds at the cursor: its text without what is already typed since its
--- start, and without the closers after the cursor that it replaces (those stay visible in
--- the buffer right after the ghost text). Returns nil if the item no longer fits.
local function visible_part(bufnr, item, row, col)
  local typed = buf_text(bufnr, item.start[1], item.start[2], row, col)
  if typed == nil or item.text:sub(1, #typed) ~= typed then
    return nil
  end
  local rest = item.text:sub(#typed + 1)
  local absorbed = buf_text(bufnr, row, col, item.stop[1], item.stop[2]) or ""
  if absorbed ~= "" and rest:sub(-#absorbed) == absorbed then
    rest = rest:sub(1, #rest - #absorbed)
  end
  return rest
end

-- Drawing ---------------------------------------------------------------------------------------

local function expand_tabs(text)
  local width = vim.bo.tabstop > 0 and vim.bo.tabstop or 8
  return (text:gsub("\t", string.rep(" ", width)))
end

local function render(bufnr)
  local s = states[bufnr]
  vim.api.nvim_buf_clear_namespace(bufnr, M.ns, 0, -1)
  s.shown = nil
  local item = s.items and s.items[s.index]
  if not item then
    return
  end
  local row, col = cursor()
  local text = visible_part(bufnr, item, row, col)
  if not text or text == "" then
    return
  end
  local lines = vim.split(text, "\n", { plain = true })
  local mark = {
    virt_text = { { lines[1], "InfillSuggestion" } },
    virt_text_pos = "inline",
    hl_mode = "combine",
    -- Right gravity: the cursor shows before the ghost text, not after it.
    right_gravity = true,
  }
  if #lines > 1 then
    local extra = {}
    for i = 2, #lines do
      extra[#extra + 1] = { { expand_tabs(lines[i]), "InfillSuggestion" } }
    end
    mark.virt_lines = extra
  end
  if lines[1] == "" then
    mark.virt_text, mark.virt_text_pos = nil, nil -- nothing to draw on the cursor's line
  end
  vim.api.nvim_buf_set_extmark(bufnr, M.ns, row, col, mark)
  s.shown = { text = text, tick = vim.b[bufnr].changedtick, row = row, col = col }
  if counted(item) and not item.told_shown then
    item.told_shown = true
    tell(bufnr, "textDocument/didShowCompletion", { item = item.raw })
  end
end

--- The visible suggestion of the buffer, or nil: { text, row, col, index, count }.
function M.current(bufnr)
  bufnr = bufnr or vim.api.nvim_get_current_buf()
  local s = states[bufnr]
  if not (s and s.shown) then
    return nil
  end
  return {
    text = s.shown.text,
    row = s.shown.row,
    col = s.shown.col,
    index = s.index,
    count = #s.items,
  }
end

--- Whether a request is on its way for the buffer (waiting for the debounce or the server).
function M.busy(bufnr)
  local s = states[bufnr or vim.api.nvim_get_current_buf()]
  return s ~= nil and (s.timer ~= nil or s.pending ~= nil)
end

function M.visible(bufnr)
  return M.current(bufnr) ~= nil
end

-- Requests --------------------------------------------------------------------------------------

local function to_items(client, bufnr, result)
  local list = result
  if type(result) == "table" and result.items then
    list = result.items -- an InlineCompletionList
  end
  local items, seen = {}, {}
  for _, raw in ipairs(list or {}) do
    local text = raw.insertText
    if type(text) == "table" then
      text = text.value -- a snippet: shown and inserted as plain text
    end
    if type(text) == "string" and text ~= "" and not seen[text] then
      seen[text] = true
      local row, col = cursor()
      local item = { text = text, start = { row, col }, stop = { row, col }, raw = raw }
      if raw.range then
        item.start = { lsp.from_lsp(client, bufnr, raw.range.start) }
        item.stop = { lsp.from_lsp(client, bufnr, raw.range["end"]) }
      end
      items[#items + 1] = item
    end
  end
  return items
end

--- Asks the server for suggestions at the cursor; `on_items(items)` runs if the answer is
--- still about the current buffer state.
local function request(bufnr, trigger, on_items)
  local client = lsp.get_client(bufnr)
  if not client then
    return
  end
  local s = state_of(bufnr)
  cancel_pending(s)
  s.seq = s.seq + 1
  local seq = s.seq
  local row, col = cursor()
  local tick = vim.b[bufnr].changedtick
  local params = {
    textDocument = { uri = vim.uri_from_bufnr(bufnr) },
    position = lsp.to_lsp(client, bufnr, row, col),
    context = { triggerKind = trigger },
  }
  local kind = trigger == INVOKED and "invoked" or "automatic"
  note("request %d (%s) at (%d,%d)", seq, kind, row + 1, col)
  local id = compat.request(client, "textDocument/inlineCompletion", params, function(err, result)
    if s.seq ~= seq then
      note("answer %d dropped: request %d superseded it", seq, s.seq)
      return -- a newer request was made meanwhile
    end
    s.pending = nil
    if err then
      note("answer %d: error %s", seq, vim.inspect(err))
      M.last_error = err -- kept for :InfillStatus and tests; suggestions just do not show
      return
    end
    if not vim.api.nvim_buf_is_valid(bufnr) then
      return
    end
    if vim.api.nvim_get_current_buf() ~= bufnr or not in_insert_mode() then
      note("answer %d dropped: not in insert mode in its buffer", seq)
      return
    end
    local now_row, now_col = cursor()
    if vim.b[bufnr].changedtick ~= tick or now_row ~= row or now_col ~= col then
      -- Stale: the buffer or the cursor moved on. The change that did it fired (or will fire)
      -- its own event, and that one asks again for the new state.
      note("answer %d dropped: asked at (%d,%d) tick %d", seq, row + 1, col, tick)
      return
    end
    local items = to_items(client, bufnr, result)
    note("answer %d: %d item(s)", seq, #items)
    M.last_answer = {
      bufnr = bufnr,
      invoked = trigger == INVOKED,
      count = #items,
      tick = tick,
      row = row,
      col = col,
    }
    on_items(items)
  end, bufnr)
  if id then
    s.pending = { id = id, client_id = client.id, tick = tick, row = row, col = col }
  end
end

local function show(bufnr, items, index)
  local s = state_of(bufnr)
  s.items, s.index = items, index or 1
  render(bufnr)
end

--- Requests a suggestion after the debounce (automatic trigger).
function M.schedule(bufnr)
  local s = state_of(bufnr)
  stop_timer(s)
  if not M.enabled or not config.options.auto_trigger then
    return
  end
  lsp.debounce(s, config.options.debounce_ms, function()
    if vim.api.nvim_get_current_buf() == bufnr and in_insert_mode() then
      request(bufnr, AUTOMATIC, function(items)
        show(bufnr, items, 1)
      end)
    end
  end)
end

--- Says that the user's request found nothing, rather than leaving them with silence.
local function say_none()
  vim.notify("infill: no suggestion here", vim.log.levels.INFO)
end

--- Requests suggestions now (invoked): several items to cycle through.
function M.trigger(bufnr, on_done)
  bufnr = bufnr or vim.api.nvim_get_current_buf()
  request(bufnr, INVOKED, function(items)
    if #items == 0 then
      show(bufnr, items, 1) -- nothing shows: the old suggestion was about another state
      say_none()
    elseif on_done then
      on_done(items)
    else
      show(bufnr, items, 1)
    end
  end)
end

-- Events ----------------------------------------------------------------------------------------

--- Whether `record` (the shown suggestion or the request in flight) is about the buffer
--- state of now: then an event about that same state changes nothing.
local function is_now(bufnr, record)
  if not record then
    return false
  end
  local row, col = cursor()
  return record.tick == vim.b[bufnr].changedtick and record.row == row and record.col == col
end

function M.on_change(bufnr)
  local s = states[bufnr]
  note("event: %s", s and s.pending and "request pending" or "no request pending")
  -- CursorMovedI right after TextChangedI, our own partial accept, or a CursorMovedI that
  -- comes after the keys that asked for suggestions: nothing to redo.
  if s and (is_now(bufnr, s.shown) or is_now(bufnr, s.pending)) then
    return
  end
  M.clear(bufnr)
  M.schedule(bufnr)
end

-- Accepting -------------------------------------------------------------------------------------

-- Ends the undo block typed so far, so that `u` takes back the suggestion on its own.
local function break_undo()
  vim.o.undolevels = vim.o.undolevels
end

--- Puts `text` at 0-based (row, col) over the bytes up to `stop`; the cursor goes after it.
local function put(bufnr, srow, scol, erow, ecol, text)
  local lines = vim.split(text, "\n", { plain = true })
  vim.api.nvim_buf_set_text(bufnr, srow, scol, erow, ecol, lines)
  local last_row = srow + #lines - 1
  local last_col = (#lines == 1 and scol or 0) + #lines[#lines]
  vim.api.nvim_win_set_cursor(0, { last_row + 1, last_col })
end

--- Accepts the whole suggestion: its range is replaced by its text.
function M.accept(bufnr)
  bufnr = bufnr or vim.api.nvim_get_current_buf()
  local s = states[bufnr]
  if not (s and s.shown) then
    return false
  end
  local item = s.items[s.index]
  M.clear(bufnr)
  break_undo()
  put(bufnr, item.start[1], item.start[2], item.stop[1], item.stop[2], item.text)
  local client = lsp.get_client(bufnr)
  if client and counted(item) then
    compat.exec_cmd(client, item.raw.command, bufnr) -- LSP: the item's command, after inserting
  end
  return true
end

--- The first word of `text` (with the blanks before it), or its first run of punctuation.
local function first_word(text)
  return text:match("^%s*[%w_]+") or text:match("^%s*[^%w_%s]+") or text:match("^%s+") or text
end

--- The text up to the end of its first line; a leading line break takes the next line too.
local function first_line(text)
  local nl = text:find("\n", 1, true)
  if nl == 1 then
    local next_nl = text:find("\n", 2, true)
    return next_nl and text:sub(1, next_nl - 1) or text
  end
  return nl and text:sub(1, nl - 1) or text
end

--- Accepts part of the suggestion at the cursor and keeps showing the rest.
local function accept_part(bufnr, pick)
  local s = states[bufnr]
  if not (s and s.shown) then
    return false
  end
  local part = pick(s.shown.text)
  if part == "" then
    return false
  end
  if part == s.shown.text then
    return M.accept(bufnr)
  end
  local item = s.items[s.index]
  local row, col = cursor()
  local typed = buf_text(bufnr, item.start[1], item.start[2], row, col) or ""
  break_undo()
  put(bufnr, row, col, row, col, part)
  if counted(item) then
    -- Copilot's clients count `acceptedLength` from the item's start, in UTF-16 units.
    local units = compat.units_of_byte(item.text, #typed + #part, "utf-16")
    tell(bufnr, "textDocument/didPartiallyAcceptCompletion", { item = item.raw, acceptedLength = units })
  end
  -- The closers the item replaces moved along with the inserted text.
  local lines = vim.split(part, "\n", { plain = true })
  if item.stop[1] == row then
    local new_row, new_col = cursor()
    item.stop = { new_row, item.stop[2] - col + new_col }
  else
    item.stop = { item.stop[1] + #lines - 1, item.stop[2] }
  end
  s.items = { item }
  s.index = 1
  stop_timer(s)
  cancel_pending(s)
  render(bufnr)
  return true
end

function M.accept_word(bufnr)
  return accept_part(bufnr or vim.api.nvim_get_current_buf(), first_word)
end

function M.accept_line(bufnr)
  return accept_part(bufnr or vim.api.nvim_get_current_buf(), first_line)
end

-- Cycling ---------------------------------------------------------------------------------------

local function cycle(bufnr, step)
  bufnr = bufnr or vim.api.nvim_get_current_buf()
  local s = state_of(bufnr)
  -- Only a suggestion on show for this very buffer state can be cycled here: the keys that
  -- moved the cursor or changed the text may still be ahead of their events (typeahead
  -- delays CursorMovedI and TextChangedI), so `s.items` may be about a state that is gone.
  local current_state = is_now(bufnr, s.shown)
  local count = s.items and #s.items or 0
  note("cycle %d: %d item(s)%s", step, count, current_state and " on show" or "")
  if current_state and #s.items > 1 then
    s.index = (s.index - 1 + step) % #s.items + 1
    render(bufnr)
    return
  end
  -- One suggestion or none: ask for several, and move away from the one shown.
  local current = current_state and s.items[s.index].text or nil
  stop_timer(s)
  M.trigger(bufnr, function(items)
    local index = 1
    for i, item in ipairs(items) do
      if item.text == current then
        index = (i - 1 + step) % #items + 1
      end
    end
    show(bufnr, items, index)
  end)
end

function M.next(bufnr)
  cycle(bufnr, 1)
end

function M.prev(bufnr)
  cycle(bufnr, -1)
end

-- Setup -----------------------------------------------------------------------------------------

function M.attach(bufnr)
  local group = lsp.attach_once(bufnr, "ghost")
  if not group then
    return
  end
  vim.api.nvim_create_autocmd({ "InsertEnter", "TextChangedI", "TextChangedP", "CursorMovedI" }, {
    group = group,
    buffer = bufnr,
    callback = function()
      M.on_change(bufnr)
    end,
  })
  vim.api.nvim_create_autocmd({ "InsertLeave", "BufLeave" }, {
    group = group,
    buffer = bufnr,
    callback = function()
      M.clear(bufnr)
    end,
  })
  lsp.on_detach(bufnr, group, function()
    M.clear(bufnr)
    states[bufnr] = nil
    vim.b[bufnr].infill_ghost_attached = nil
  end)
  -- Attached while already typing (the server started on this very buffer).
  if vim.api.nvim_get_current_buf() == bufnr and in_insert_mode() then
    M.schedule(bufnr)
  end
end

function M.set_enabled(on)
  M.enabled = on
  if not on then
    for bufnr in pairs(states) do
      M.clear(bufnr)
    end
  end
end

return M
