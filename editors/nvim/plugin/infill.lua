-- User commands of infill-lsp. They exist before setup() so that :InfillStatus can say what
-- is missing; nothing starts until require("infill").setup() is called.
if vim.g.loaded_infill then
  return
end
vim.g.loaded_infill = true

local command = vim.api.nvim_create_user_command

command("InfillExplain", function(cmd)
  require("infill").explain(cmd)
end, { range = true, desc = "infill: explain the selection, or the block around the cursor" })

command("InfillStop", function()
  require("infill").stop()
end, { desc = "infill: stop the running explanation" })

command("InfillRewrite", function(cmd)
  require("infill").rewrite(cmd)
end, { range = true, nargs = "*", desc = "infill: rewrite the selection ({instruction})" })

command("InfillStatus", function()
  require("infill").print_status()
end, { desc = "infill: the server's model and state" })

command("InfillToggle", function()
  require("infill").toggle()
end, { desc = "infill: automatic suggestions on/off" })
