-- Options of require("infill").setup(): the defaults, and merging the user's over them.
local M = {}

M.defaults = {
  -- How to start the server; the first word must be an executable.
  cmd = { "infill-lsp" },
  -- Filetypes to attach to. `{ "*" }` (or nil) means every normal file buffer.
  filetypes = {
    "python", "lua", "javascript", "javascriptreact", "typescript", "typescriptreact",
    "rust", "go", "c", "cpp", "objc", "objcpp", "cs", "java", "kotlin", "scala", "swift",
    "ruby", "php", "perl", "r", "julia", "haskell", "ocaml", "elixir", "erlang", "clojure",
    "zig", "nim", "dart", "sh", "bash", "zsh", "fish", "sql", "vim", "html", "css", "scss",
    "vue", "svelte", "make", "cmake", "dockerfile", "terraform", "yaml", "toml", "json",
  },
  -- Files that mark a project's root; without one the file's own directory is the root.
  root_markers = { ".git", "pyproject.toml", "package.json", "Cargo.toml", "go.mod", "Makefile" },
  -- The server's `infill` settings section (camelCase keys: docs/settings.md).
  settings = {},
  -- Milliseconds of quiet typing before a suggestion is requested.
  debounce_ms = 75,
  -- Suggest while typing; :InfillToggle flips it. Next/previous still ask on demand.
  auto_trigger = true,
  -- Next edits: after leaving insert mode or a change in normal mode (debounced), ask the
  -- server (when it offers them) for the next change near the cursor, and show it.
  next_edits = true,
  -- Neovim 0.12+: use the built-in vim.lsp.inline_completion instead of our ghost text.
  builtin_inline_completion = false,
  -- Insert-mode keys (and two normal-mode ones, below); `false` disables one. Accept keys fall
  -- back to their own action when no suggestion shows.
  keymaps = {
    accept = "<Tab>",
    accept_word = "<M-Right>",
    accept_line = "<M-Down>",
    next = "<M-]>",
    prev = "<M-[>",
    dismiss = "<C-]>",
    -- Normal-mode keys for next edits; without one shown they do what they always do.
    next_edit_accept = "<Tab>", -- jump to the nearest edit, then apply them all
    next_edit_dismiss = "<Esc>",
  },
  -- Position encodings to offer the server, most wanted first (nil: Neovim's own offer,
  -- UTF-8 first). For testing the other encodings, mostly.
  position_encodings = nil,
  -- The explanation's floating window, as a fraction of the editor's size.
  explain = { width = 0.6, height = 0.6, border = "rounded" },
}

M.options = vim.deepcopy(M.defaults)

function M.apply(user)
  user = user or {}
  local merged = vim.tbl_deep_extend("force", vim.deepcopy(M.defaults), user)
  -- Lists replace the defaults rather than merge index by index.
  if user.filetypes ~= nil then
    merged.filetypes = user.filetypes
  end
  if user.cmd ~= nil then
    merged.cmd = user.cmd
  end
  if user.root_markers ~= nil then
    merged.root_markers = user.root_markers
  end
  M.options = merged
  return merged
end

return M
