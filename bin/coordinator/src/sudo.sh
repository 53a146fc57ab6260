#!/bin/sh
# Lazaret's `sudo`, for a profile's `user` (linked at /usr/local/bin/sudo,
# ahead of an image's own): the command runs as root inside, asking
# nothing. This script parses sudo's options; lazaret-sudo's service
# (bin/sudo/src/main.rs), which the sandbox's init runs as root, runs the
# command with the caller's standard descriptors, environment and
# directory, and gives back its status. It needs no set-user-ID program,
# which gVisor ignores unless runsc has --allow-suid. Root inside has no
# more than a root session has; the sandbox, not root inside, is the
# boundary.
set -u
usage() {
  echo "usage: sudo [-nEHSk] [-u root] [-i | -s] [NAME=value...] [--] [command [arg...]]" >&2
}
keep_env=0
shell=0
login=0
target=root
while [ $# -gt 0 ]; do
  case $1 in
    # Nothing to ask or remember: no password, no timestamp.
    -n | --non-interactive | -H | --set-home | -S | --stdin | -k | --reset-timestamp | -K | --remove-timestamp | -P | --preserve-groups) ;;
    -E | --preserve-env | --preserve-env=*) keep_env=1 ;;
    -u | --user)
      [ $# -ge 2 ] || { usage; exit 1; }
      target=$2
      shift
      ;;
    --user=*) target=${1#--user=} ;;
    -u?*) target=${1#-u} ;;
    -i | --login) login=1 ;;
    -s | --shell) shell=1 ;;
    -v | --validate) exit 0 ;;
    -l | --list)
      echo "User $(id -un 2>/dev/null || id -u) may run the following commands inside this sandbox:"
      echo "    (root) NOPASSWD: ALL"
      exit 0
      ;;
    -V | --version) echo "Lazaret's sudo (root inside the sandbox, no password)"; exit 0 ;;
    -h | --help) usage; exit 0 ;;
    --) shift; break ;;
    # Several short options at once (-nE): one at a time.
    -[!-]?*)
      rest=${1#-?}
      first=${1%"$rest"}
      shift
      set -- "$first" "-$rest" "$@"
      continue
      ;;
    -*) echo "sudo: $1: not an option of Lazaret's sudo" >&2; usage; exit 1 ;;
    *) break ;;
  esac
  shift
done
case $target in
  root | 0 | '#0') ;;
  *) echo "sudo: Lazaret's sudo runs commands as root only, not as $target" >&2; exit 1 ;;
esac
# NAME=value words before the command set variables for it, as sudo's do.
assign=0
for a in "$@"; do
  case $a in
    [A-Za-z_]*=*) assign=$((assign + 1)) ;;
    *) break ;;
  esac
done
if [ $# -eq "$assign" ] && [ "$shell" = 0 ] && [ "$login" = 0 ]; then
  usage
  exit 1
fi
me=$(id -un 2>/dev/null || id -u)
set -- SUDO_USER="$me" SUDO_UID="$(id -u)" SUDO_GID="$(id -g)" "$@"
assign=$((assign + 3))
if [ "$keep_env" = 0 ]; then
  set -- HOME=/root USER=root LOGNAME=root "$@"
  assign=$((assign + 3))
fi
if [ "$login" = 1 ] || [ "$shell" = 1 ]; then
  sh=/bin/sh
  [ -x /bin/bash ] && sh=/bin/bash
  [ "$shell" = 1 ] && [ -n "${SHELL:-}" ] && sh=$SHELL
  # The words after the variables become the shell's command, each
  # quoted, as sudo -s and -i run them; the variables stay in "$@".
  cmd=
  i=0
  for a in "$@"; do
    shift
    i=$((i + 1))
    if [ "$i" -le "$assign" ]; then
      set -- "$@" "$a"
    else
      cmd="$cmd '$(printf '%s' "$a" | sed "s/'/'\\\\''/g")'"
    fi
  done
  if [ "$login" = 1 ]; then
    # A login shell in root's home, which only root can enter.
    set -- "$@" "$sh" -c 'cd /root 2>/dev/null || cd /; exec "$0" -l "$@"' "$sh"
  else
    set -- "$@" "$sh"
  fi
  [ -n "$cmd" ] && set -- "$@" -c "${cmd# }"
fi
exec /.lazaret/bin/lazaret-sudo --run -- env "$@"
