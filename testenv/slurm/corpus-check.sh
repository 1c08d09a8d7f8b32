#!/bin/bash
# Submit every script of the sbatch corpus with `sbatch --hold` (as the calling user, cwd a
# temporary directory), print ACCEPTED/REJECTED with sbatch's exit code and message, then
# cancel the accepted jobs. Usage: corpus-check.sh [CORPUS_DIR]
set -uo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
CORPUS=${1:-$(cd "$HERE/../../.." && pwd)/shared/data/sbatch-corpus}
work=$(mktemp -d); cd "$work" || exit 1
ok=0; bad=0; ids=()
for f in "$CORPUS"/*; do
  name=$(basename "$f"); [ "$name" = SOURCES.tsv ] && continue
  out=$(sbatch --hold --parsable "$f" 2>&1); rc=$?
  if [ $rc = 0 ]; then
    ok=$((ok + 1)); ids+=("${out%%;*}")
    printf 'ACCEPTED %-8s %s\n' "${out%%;*}" "$name"
  else
    bad=$((bad + 1))
    printf 'REJECTED rc=%-3s %s\n' "$rc" "$name"; printf '    | %s\n' "${out//$'\n'/$'\n'    | }"
  fi
done
[ ${#ids[@]} = 0 ] || scancel "${ids[@]}"
rm -rf "$work"
echo "accepted $ok, rejected $bad"
