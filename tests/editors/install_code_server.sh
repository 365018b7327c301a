#!/bin/sh
# Install code-server (VS Code in the browser) from npm into DEST, for the VS Code end-to-end
# test (tests/editors/test_vscode_e2e.py). Afterwards DEST/node_modules/.bin/code-server runs.
#
#   tests/editors/install_code_server.sh DEST
#
# Needs: Node 20 with npm, a C/C++ toolchain, Debian's libkrb5-dev (the `kerberos` native
# module) and ripgrep. Idempotent: a stamp file in DEST makes a second run return at once.
#
# Works without access to GitHub: code-server's `@vscode/ripgrep` dependency downloads a ripgrep
# binary from GitHub when it is installed. Its install script first looks for the archive in
# a download cache under $TMPDIR, so we put an archive holding Debian's /usr/bin/rg there, in a
# private TMPDIR, under the name the script looks for.
set -eu

CODE_SERVER_VERSION=4.100.3
# Pinned by code-server 4.100.3's lib/vscode/npm-shrinkwrap.json, and the ripgrep release
# that version of @vscode/ripgrep downloads (VERSION in its lib/postinstall.js).
VSCODE_RIPGREP_VERSION=1.15.11
RIPGREP_RELEASE=v13.0.0-10

if [ $# -ne 1 ]; then
    echo "usage: $0 DEST" >&2
    exit 2
fi
mkdir -p "$1"
DEST=$(cd "$1" && pwd)
STAMP="$DEST/.installed-$CODE_SERVER_VERSION"
BIN="$DEST/node_modules/.bin/code-server"

if [ -f "$STAMP" ] && [ -x "$BIN" ]; then
    echo "code-server $CODE_SERVER_VERSION already installed in $DEST"
    exit 0
fi

# Why the install did not happen, for the end-to-end test's skip message.
FAILED="$DEST/.install-failed"
rm -f "$FAILED"
fail() {
    echo "error: $*" >&2
    echo "$*" >"$FAILED"
    exit 1
}

for tool in node npm rg; do
    if ! command -v "$tool" >/dev/null 2>&1; then
        fail "'$tool' not found (apt-get install nodejs npm ripgrep)"
    fi
done
node_major=$(node -p 'process.versions.node.split(".")[0]')
if [ "$node_major" != 20 ]; then
    fail "code-server $CODE_SERVER_VERSION needs Node 20; this is Node $node_major"
fi
# The `kerberos` native module compiles against the GSSAPI headers.
if [ ! -f /usr/include/gssapi/gssapi.h ]; then
    fail "no GSSAPI headers for code-server's native modules (apt-get install libkrb5-dev)"
fi

case "$(uname -m)" in
    x86_64) rg_target=x86_64-unknown-linux-musl ;;
    aarch64) rg_target=aarch64-unknown-linux-musl ;;
    *) fail "no ripgrep stand-in for $(uname -m)" ;;
esac

start=$(date +%s)
rm -f "$STAMP"

# The private TMPDIR with the ripgrep archive @vscode/ripgrep's install script will find.
tmp="$DEST/.tmp"
rm -rf "$tmp"
cache="$tmp/vscode-ripgrep-cache-$VSCODE_RIPGREP_VERSION"
mkdir -p "$cache" "$tmp/rg"
cp "$(command -v rg)" "$tmp/rg/rg"
tar czf "$cache/ripgrep-$RIPGREP_RELEASE-$rg_target.tar.gz" -C "$tmp/rg" rg
export TMPDIR="$tmp"

# code-server's postinstall.sh refuses to run as root unless unsafe-perm is set, and runs
# nested `npm install`s; npx-style prompts must not wait for an answer.
export npm_config_unsafe_perm=true
export npm_config_yes=true
export npm_config_audit=false
export npm_config_fund=false
export npm_config_update_notifier=false
# Build native modules against the installed Node headers rather than downloading them.
if [ -z "${npm_config_nodedir:-}" ] && [ -f /usr/include/node/common.gypi ]; then
    export npm_config_nodedir=/usr
fi

cd "$DEST"
# allowScripts: newer npm versions run a dependency's install scripts only when the project
# allows them (older ones ignore the field). code-server's postinstall installs VS Code's own
# dependencies; argon2 builds a native module.
cat >package.json <<JSON
{
  "private": true,
  "description": "code-server for the infill-lsp VS Code end-to-end test",
  "allowScripts": {
    "code-server@$CODE_SERVER_VERSION": true,
    "argon2": true
  }
}
JSON
npm install --no-save "code-server@$CODE_SERVER_VERSION" \
    || fail "npm install code-server@$CODE_SERVER_VERSION failed (its output is above)"

# Check what the tests rely on, so that a broken install fails here and not in the tests.
vscode="$DEST/node_modules/code-server/lib/vscode"
if [ ! -x "$vscode/node_modules/@vscode/ripgrep/bin/rg" ]; then
    fail "ripgrep was not installed into $vscode/node_modules/@vscode/ripgrep/bin"
fi
# (XDG_*: code-server writes a default config file on its first run; keep it out of $HOME.)
XDG_CONFIG_HOME="$tmp" XDG_DATA_HOME="$tmp" "$BIN" --version

rm -rf "$tmp"
touch "$STAMP"
end=$(date +%s)
echo "code-server $CODE_SERVER_VERSION installed in $DEST in $((end - start)) s ($(du -sh "$DEST" | cut -f1))"
