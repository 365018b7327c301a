-- Differences between Neovim 0.10, 0.11 and 0.12 in one place.
--
-- 0.11 made client methods take `self` (client:request) and deprecated the 0.10 closures
-- (client.request), and changed vim.str_utfindex/str_byteindex to take an encoding.
local M = {}

M.has_011 = vim.fn.has("nvim-0.11") == 1
M.uv = vim.uv or vim.loop

--- Sends a request; returns the request id, or nil if the client is gone.
function M.request(client, method, params, handler, bufnr)
  local ok, id
  if M.has_011 then
    ok, id = client:request(method, params, handler, bufnr)
  else
    ok, id = client.request(method, params, handler, bufnr)
  end
  return ok and id or nil
end

function M.request_sync(client, method, params, timeout_ms, bufnr)
  if M.has_011 then
    return client:request_sync(method, params, timeout_ms, bufnr)
  end
  return client.request_sync(method, params, timeout_ms, bufnr)
end

function M.notify(client, method, params)
  if M.has_011 then
    return client:notify(method, params)
  end
  return client.notify(method, params)
end

function M.cancel(client, id)
  if M.has_011 then
    return client:cancel_request(id)
  end
  return client.cancel_request(id)
end

function M.is_stopped(client)
  if M.has_011 then
    return client:is_stopped()
  end
  return client.is_stopped()
end

--- Runs an LSP command through the client (workspace/executeCommand; 0.11 checks that the
--- server lists it).
function M.exec_cmd(client, command, bufnr)
  if M.has_011 then
    return client:exec_cmd(command, { bufnr = bufnr })
  end
  local params = { command = command.command, arguments = command.arguments }
  return M.request(client, "workspace/executeCommand", params, function() end, bufnr)
end

--- A byte column of `line` in the units of `encoding` ("utf-8", "utf-16" or "utf-32").
function M.units_of_byte(line, col, encoding)
  col = math.max(0, math.min(col, #line))
  if encoding == "utf-8" then
    return col
  end
  if M.has_011 then
    return vim.str_utfindex(line, encoding, col, false)
  end
  local utf32, utf16 = vim.str_utfindex(line, col)
  return encoding == "utf-16" and utf16 or utf32
end

--- The byte column of `units` (in `encoding`) into `line`; past the end means the end.
function M.byte_of_units(line, units, encoding)
  units = math.max(0, units)
  if encoding == "utf-8" then
    return math.min(units, #line)
  end
  if M.has_011 then
    return vim.str_byteindex(line, encoding, units, false)
  end
  local ok, col = pcall(vim.str_byteindex, line, units, encoding == "utf-16")
  return ok and col or #line
end

--- Neovim 0.12's own inline completion, when present.
function M.builtin_inline_completion()
  return vim.lsp.inline_completion
end

return M
