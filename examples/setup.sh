# shellcheck shell=sh
# Installs one agent inside its setup profile's sandbox, as root there:
#
#   lazaret run --profile claude-code-setup -- sh -s claude-code < examples/setup.sh
#
# (codex and aider likewise). Everything lands in State Anchors (/usr/local,
# /opt, /etc), so `lazaret image commit` can make an image of it afterwards.
# Each agent is set to run unattended, its own sandbox and questions off:
# Lazaret is the sandbox (Claude Code and Codex here, in their system-wide
# settings; aider by its profile's env).
# Only public registries are used: the npm registry, Debian's mirror, PyPI.
set -eu

agent="${1:?usage: sh -s claude-code|codex|aider < setup.sh}"

# Node.js for the npm-installed agents. Debian 12's nodejs is 18 and
# Claude Code asks for 22 or newer; nodejs.org is not always reachable,
# the npm registry is, and it carries Node's own builds (node-linux-*).
node_major=22
# npm 10 is the major Node 22 ships; npm 12 blocks install scripts by
# default, and Claude Code's postinstall is what puts its binary in place.
npm_major=10

# The newest tarball of PACKAGE whose version starts with PREFIX.
npm_tarball() {
  curl -fsSL -H 'Accept: application/vnd.npm.install-v1+json' "https://registry.npmjs.org/$1" |
    python3 -c '
import json, sys
doc, prefix = json.load(sys.stdin), sys.argv[1]
releases = [v for v in doc["versions"]
            if v.startswith(prefix) and all(p.isdigit() for p in v.split("."))]
if not releases:
    sys.exit("no release %sx of %s" % (prefix, doc.get("name")))
newest = max(releases, key=lambda v: tuple(int(p) for p in v.split(".")))
print(doc["versions"][newest]["dist"]["tarball"])' "$2"
}

install_node() {
  case "$(uname -m)" in
    x86_64) arch=x64 ;;
    aarch64) arch=arm64 ;;
    *) echo "setup: no Node.js build on the npm registry for $(uname -m)" >&2; exit 1 ;;
  esac
  # node itself in /usr/local/bin, so npm's global prefix is /usr/local.
  curl -fsSL "$(npm_tarball "node-linux-$arch" "$node_major.")" |
    tar -xz -C /usr/local/bin --strip-components=2 --no-same-owner package/bin/node
  rm -rf /usr/local/lib/node_modules/npm
  mkdir -p /usr/local/lib/node_modules/npm
  curl -fsSL "$(npm_tarball npm "$npm_major.")" |
    tar -xz -C /usr/local/lib/node_modules/npm --strip-components=1 --no-same-owner
  ln -sf ../lib/node_modules/npm/bin/npm-cli.js /usr/local/bin/npm
  ln -sf ../lib/node_modules/npm/bin/npx-cli.js /usr/local/bin/npx
  echo "setup: node $(node --version), npm $(npm --version)"
}

npm_agent() {
  install_node
  npm install --global --no-fund --no-audit --no-update-notifier "$1"
  # The download cache would otherwise stay in /root and in the image.
  rm -rf /root/.npm
}

case "$agent" in
  claude-code)
    npm_agent @anthropic-ai/claude-code
    # Unattended: Lazaret is the sandbox, so Claude Code asks no permission
    # (its bypassPermissions mode, what --dangerously-skip-permissions
    # turns on; it refuses that as root, so the agent profile runs it as
    # `agent`). Managed settings, so every workspace has them and your own
    # settings.json (in the shared path) stays yours; `claude
    # --permission-mode default` asks again, for one run.
    mkdir -p /etc/claude-code
    cat >/etc/claude-code/managed-settings.json <<'JSON'
{
  "permissions": { "defaultMode": "bypassPermissions" },
  "skipDangerousModePermissionPrompt": true
}
JSON
    claude --version
    ;;
  codex)
    npm_agent @openai/codex
    # Unattended: Lazaret is the sandbox, and Codex's own (bubblewrap)
    # cannot start inside gVisor. Codex's system config, its lowest layer:
    # $CODEX_HOME/config.toml (in the shared path) and -c still override it.
    mkdir -p /etc/codex
    cat >/etc/codex/config.toml <<'TOML'
# Written by Lazaret's examples/setup.sh: the sandbox is Lazaret's, and
# Codex's own cannot start inside gVisor.
sandbox_mode = "danger-full-access"
approval_policy = "never"
TOML
    codex --version
    ;;
  aider)
    # Debian 12's Python 3.11 (aider-chat wants >= 3.10), in a venv of its
    # own under /opt; aider-install would fetch a Python from GitHub.
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q
    apt-get install -y -q --no-install-recommends python3-venv
    apt-get clean
    rm -rf /var/lib/apt/lists/*
    python3 -m venv /opt/aider
    /opt/aider/bin/pip install --quiet --no-cache-dir --disable-pip-version-check aider-chat
    ln -sf /opt/aider/bin/aider /usr/local/bin/aider
    aider --version
    ;;
  *)
    echo "setup: unknown agent '$agent' (claude-code, codex or aider)" >&2
    exit 2
    ;;
esac
