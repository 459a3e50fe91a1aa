# Sourced by the bench/ft scripts: ft_setup LLMTRAIN sets $exe (its
# absolute path) and $top (the project root), refuses a build without
# Gloo (exit 77: the workers are processes over Gloo), and makes a
# temporary working directory $tmp (removed at exit, and the current
# directory) holding corpus/, the project's docs as training text.
ft_setup() {
  exe=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
  top=$(cd "$(dirname "$0")/../.." && pwd)
  "$exe" features 2>/dev/null | grep -qw gloo || { echo "no gloo in this build"; exit 77; }
  tmp=$(mktemp -d) || exit 1
  trap 'rm -rf "$tmp"' EXIT
  cd "$tmp" || exit 1
  mkdir corpus && cp "$top"/doc/*.md corpus/ || exit 1
}
