# The file_report toolbox: run by `sh` inside the sandbox, in the workspace, with a clean
# environment. It may execute only what permissions.commands lists (sh, wc, grep), and of the
# kernel's environment it sees only DEMO_REPORT_OWNER (env_passthrough).
file=$1
if [ ! -f "$file" ]; then
  echo "no file $file in the workspace" >&2
  exit 2
fi
echo "$file: $(wc -l <"$file") lines, $(wc -w <"$file") words, for ${DEMO_REPORT_OWNER:-nobody}"
grep -n TODO "$file"
# Two things the sandbox refuses, shown rather than hidden:
cat "$file" >/dev/null 2>&1 || echo "(cat refused: not in permissions.commands)"
[ -z "${DEMO_SECRET:-}" ] && echo "(DEMO_SECRET not visible: not passed through)"
exit 0
