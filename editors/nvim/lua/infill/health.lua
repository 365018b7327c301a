-- :checkhealth infill
local M = {}

function M.check()
  local health = vim.health
  local config = require("infill.config")

  health.start("infill: Neovim")
  local v = vim.version()
  local version = string.format("%d.%d.%d", v.major, v.minor, v.patch)
  if vim.fn.has("nvim-0.10") == 1 then
    health.ok("Neovim " .. version)
  else
    health.warn("Neovim " .. version .. ": infill needs 0.10 or newer (inline virtual text)")
  end
  if config.options.builtin_inline_completion then
    if vim.lsp.inline_completion then
      health.ok("using Neovim's built-in vim.lsp.inline_completion")
    else
      health.warn(
        "builtin_inline_completion is set, but this Neovim has no vim.lsp.inline_completion: "
          .. "infill draws its own ghost text"
      )
    end
  end

  health.start("infill: server")
  local cmd = config.options.cmd or {}
  local exe = cmd[1]
  if exe and vim.fn.executable(exe) == 1 then
    health.ok("server executable: " .. vim.fn.exepath(exe))
  else
    health.error(
      "server executable not found: " .. tostring(exe),
      {
        "install infill-lsp (make install) and give its path: "
          .. "setup({ cmd = { '/path/to/.venv/bin/infill-lsp' } })",
      }
    )
  end
  local clients = vim.lsp.get_clients({ name = "infill" })
  if #clients == 0 then
    health.info("no running infill client (open a file of a configured filetype)")
    return
  end
  for _, client in ipairs(clients) do
    health.ok(string.format(
      "client %d running (position encoding %s, %d buffer(s))",
      client.id,
      tostring(client.offset_encoding),
      vim.tbl_count(client.attached_buffers or {})
    ))
  end

  health.start("infill: model")
  local status, err = require("infill").status(3000)
  if not status then
    health.warn("infill/status: " .. tostring(err))
    return
  end
  local text = string.format(
    "%s: %s (%s on %s, context %s)",
    status.status,
    tostring(status.model),
    tostring(status.backend),
    tostring(status.device),
    tostring(status.context_size)
  )
  if status.status == "ready" then
    health.ok(text)
  elseif status.status == "loading" then
    health.info(text)
  else
    health.error(text .. ": " .. tostring(status.last_error))
  end
end

return M
