#!/bin/bash
# device_check.sh — the real-GPU measurements the open issues wait for, as one short run for a
# session that is lent a GPU (the `device` tool, docs/BENCHMARKS.md "Measuring on a real GPU"):
# each group of bench cases in priority order, under one time budget, every report as JSON.
#
# Usage: scripts/device_check.sh [RRPDEM] [OUT]
#   RRPDEM  the rrpdem binary [target/release/rrpdem; build it here and carry it:
#           `cargo build --release`, then the device tool's `carry: ["target/release/rrpdem"]`]
#   OUT     where the reports go [$OUT, else out/device]: info.txt (adapters), log.txt (every
#           bench's table, return code and time), and one JSON report per group (<group>.json)
#
# Environment (optional):
#   DEVICE_CHECK_BUDGET  seconds for everything [300]: a group starts only with 30 s left, and
#                        is stopped at the budget's end (the JSON keeps what it measured: bench
#                        rewrites it after each measurement)
#   DEVICE_CHECK_GROUPS  the groups to run, in order [impact,quiet,dissipation,standard,impact7]
#
# The groups, and what each answers:
#   impact       issue 24: the users' job at 10⁶ in f32 (aim ≥ 10⁹ particle-steps/s), its stages
#                and kernels, with the bonds' references read per bond (`+bond-refs`: does the
#                bond kernel gain from reading them in bond order?), and rebuilds at skins
#                0.6 / 1.0 / 1.4 r_max (which skin to keep)
#   quiet        issue 24: batches that leave the grid stage out of quiet steps against the
#                grid stage in every step (`+every-step`), small and batched cases in f32
#   dissipation  issue 25: MODEL §10 on the GPU (aim: at most 40 % slower than conservative),
#                f32 and f64, rings / fcc / solid torus at 10⁵, with stages and kernels
#   standard     the standard cases, the users' job at 10⁵ and a study of 10⁴ tori (a new row
#                for docs/BENCHMARKS.md)
#   impact7      the users' job at 10⁷ in f32, with stages
# Exit status: 0 when every group that ran returned 0, 1 otherwise (details in log.txt).
set -uo pipefail

bin=${1:-target/release/rrpdem}
out=${2:-${OUT:-out/device}}
budget=${DEVICE_CHECK_BUDGET:-300}
groups=${DEVICE_CHECK_GROUPS:-impact,quiet,dissipation,standard,impact7}
mkdir -p "$out"
log="$out/log.txt"
: >"$log"

[[ -x $bin ]] || { echo "device_check.sh: no rrpdem binary at $bin (build it and carry it)" >&2; exit 1; }

# A Vulkan loader and NVIDIA's driver manifest where the machine lacks them (the device tool's
# notes: loaders carried as .deb files in .gl/, unpacked into /).
if ! ldconfig -p 2>/dev/null | grep -q libvulkan && compgen -G ".gl/*.deb" >/dev/null; then
  for f in .gl/*.deb; do dpkg -x "$f" /; done
  ldconfig
fi
icd=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
if [[ -z ${VK_DRIVER_FILES:-} && -e $icd ]]; then
  export VK_DRIVER_FILES=$icd
fi

"$bin" info >"$out/info.txt" 2>&1
echo "info rc=$? (adapters in info.txt)" >>"$log"

# The bench arguments of each group.
args_of() {
  case $1 in
    impact) echo "--cases solid-torus-impact-1e6,solid-torus-impact-1e6+bond-refs,solid-torus-impact-1e6+skin=1.0,\
solid-torus-impact-1e6+skin=1.4 \
--engines gpu-f32 --stages --steps 100 --min-seconds 1" ;;
    quiet) echo "--cases torus,torus+every-step,rings-1e5,rings-1e5+every-step,fcc-1e5,fcc-1e5+every-step,\
tori-1e4,tori-1e4+every-step --engines gpu-f32 --steps 1000 --min-seconds 1" ;;
    dissipation) echo "--cases rings-1e5,rings-1e5+damped,rings-1e5+friction,fcc-1e5,fcc-1e5+damped,fcc-1e5+friction,\
solid-torus-1e5,solid-torus-1e5+damped,solid-torus-1e5+friction --engines gpu-f32,gpu-f64 --stages --steps 100 --min-seconds 1" ;;
    standard) echo "--cases standard,solid-torus-impact-1e5,tori-1e4 --engines gpu-f32,gpu-f64 --steps 100 --min-seconds 1" ;;
    impact7) echo "--cases solid-torus-impact-1e7 --engines gpu-f32 --stages --steps 20 --min-seconds 1" ;;
    *) return 1 ;;
  esac
}

status=0
IFS=, read -ra wanted <<<"$groups"
for g in "${wanted[@]}"; do
  if ! a=$(args_of "$g"); then
    echo "device_check.sh: unknown group '$g'" >&2
    status=1
    continue
  fi
  left=$((budget - SECONDS))
  if ((left < 30)); then
    echo "$g skipped: ${left} s of the budget left" >>"$log"
    continue
  fi
  echo "== $g: rrpdem bench $a" >>"$log"
  # shellcheck disable=SC2086 # the arguments are words on purpose
  timeout "$left" "$bin" bench $a --json "$out/$g.json" >>"$log" 2>&1
  rc=$?
  echo "$g rc=$rc at ${SECONDS} s" >>"$log"
  ((rc == 0)) || status=1
done
cat "$log"
exit $status
