#!/usr/bin/env bash
# The carrying side of a GPU lease on this project's lent machine (offline; torch 2.11 preinstalled;
# a call carries 64 MiB; files outside the repository copy survive between calls while it stays warm;
# a process started with setsid outlives its call). Each call runs one step, from the repository root:
#   start LEASE_SCRIPT   install .whl/base (wheels; sdists built there, no build isolation) into
#                        /tmp/site, copy the repository to /tmp/repo (later calls re-sync the original),
#                        start LEASE_SCRIPT there in the background (output /tmp/lease), keep the
#                        first vLLM part if this call carried it
#   part                 keep the vLLM parts this call carried (.whl/parts/*) in /tmp/parts
#   vllm                 after the last part: join and hash-check the parts (scripts/wheel_parts.py),
#                        install them into /tmp/site and write /tmp/lease/vllm_ready once vllm imports
#                        (in the background)
#   wait SECONDS         print the lease log until it says "all done" or SECONDS pass
#   collect              the lease's records (no weights) as $OUT/lease.tgz, and its tables in $OUT
# Env: DEADLINE_IN (seconds from `start` after which no job starts; default 560).
set -u
step=${1:?start|part|vllm|wait|collect}
site=/tmp/site lease=/tmp/lease parts=/tmp/parts
mkdir -p "$site" "$lease" "$parts"
keep_parts() { if compgen -G ".whl/parts/*" > /dev/null; then cp -n .whl/parts/* "$parts"/; fi; printf '%s ' "$parts"/*; echo; }
case $step in
  start)
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$site" .whl/base/*.whl \
      > "$lease/pip_base.log" 2>&1 || { tail "$lease/pip_base.log"; exit 1; }
    for s in .whl/base/sdist/*; do
      python3 -m pip install -q --no-index --no-deps --no-build-isolation --no-cache-dir --target "$site" "$s" \
        >> "$lease/pip_base.log" 2>&1 || echo "sdist not installed: $s"
    done
    rm -rf /tmp/repo && mkdir /tmp/repo && tar -c --exclude=./.whl --exclude=./.git . | tar -x -C /tmp/repo
    keep_parts
    cd /tmp/repo || exit 1
    export PYTHONPATH="$site:/tmp/repo/src" RLVR_CACHE=/tmp/repo/.gpucache
    python3 -c "import trl, hydra, reasoning_gym, math_verify, liger_kernel, rlvr.model.varlen; print('imports ok')" || exit 1
    DEADLINE=$(( $(date +%s) + ${DEADLINE_IN:-560} )) VLLM_READY="$lease/vllm_ready" \
      setsid nohup bash "${2:?LEASE_SCRIPT}" "$lease" > "$lease/driver.log" 2>&1 < /dev/null &
    sleep 5; cat "$lease/lease.log" 2>/dev/null
    ;;
  part) keep_parts; tail -3 "$lease/lease.log" ;;
  vllm)
    keep_parts
    setsid nohup bash -c "python3 /tmp/repo/scripts/wheel_parts.py join $parts /tmp/vllm_wheels \
      && python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target $site /tmp/vllm_wheels/*.whl \
      && cd /tmp/repo && PYTHONPATH=$site:/tmp/repo/src python3 -c 'import vllm, vllm.entrypoints.llm; print(vllm.__version__)' \
      && touch $lease/vllm_ready" > "$lease/vllm_install.log" 2>&1 < /dev/null &
    sleep 2; tail -3 "$lease/lease.log"
    ;;
  wait)
    end=$(( $(date +%s) + ${2:-60} ))
    while [ "$(date +%s)" -lt "$end" ] && ! grep -q "all done" "$lease/lease.log" 2>/dev/null; do sleep 5; done
    cat "$lease/lease.log"; tail -2 "$lease/vllm_install.log" 2>/dev/null
    ;;
  collect)
    (cd "$lease" && find . \( -name '*.json' -o -name '*.md' -o -name '*.log' -o -name '*.jsonl' -o -name '*.csv' \
      -o -name '*.txt' -o -name '*.yaml' \) -not -path '*/checkpoint*' -not -path '*/final/*' -print0 \
      | tar czf "${OUT:?}/lease.tgz" --null -T -)
    cp "$lease"/lease.log "$lease"/*.md "$OUT"/ 2>/dev/null
    ls -l "$OUT"
    ;;
esac
