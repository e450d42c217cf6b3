# bash completion for ddoctl (installed as /usr/share/bash-completion/completions/ddoctl).
# The commands and options are ddoctl's --help (tests/python/test_install.py keeps them equal).
_ddoctl() {
  local current previous
  current=${COMP_WORDS[COMP_CWORD]}
  previous=${COMP_WORDS[COMP_CWORD-1]}
  local commands="status presets settings plan stats metrics sessions top components load evict profiles"
  local options="--daemon --timeout --json --version --help"
  case "$previous" in
    --daemon|--timeout) return 0 ;;
    plan) COMPREPLY=($(compgen -W "--explain" -- "$current")); return 0 ;;
    --explain) COMPREPLY=($(compgen -f -X '!*.json' -- "$current")); return 0 ;;
    profiles) COMPREPLY=($(compgen -W "list show rm" -- "$current")); return 0 ;;
  esac
  if [[ ${COMP_WORDS[1]} == load && $COMP_CWORD -ge 3 ]]; then
    COMPREPLY=($(compgen -f -- "$current"))  # files and model folders
    return 0
  fi
  local word
  for word in "${COMP_WORDS[@]:1:COMP_CWORD-1}"; do
    if [[ " $commands " == *" $word "* ]]; then
      return 0  # a command was given: its arguments are keys and names ddoctl cannot guess
    fi
  done
  if [[ "$current" == -* ]]; then
    COMPREPLY=($(compgen -W "$options" -- "$current"))
  else
    COMPREPLY=($(compgen -W "$commands" -- "$current"))
  fi
}
complete -F _ddoctl ddoctl
