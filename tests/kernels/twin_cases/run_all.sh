#!/usr/bin/env bash
# Builds and runs the twin case programs, then the end-to-end path: both kernels built as variant
# .so files through TWIN_EXPORT_KERNEL (float/half, BUFFER_NUM 1/2) and launched by the runner.
# Prints "PASS <name>" lines; exits non-zero on the first failure. CXX overrides the compiler.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
twin="$root/kernels/twin"
cxx=${CXX:-clang++-19}
out=$(mktemp -d "${TMPDIR:-/tmp}/twin_cases.XXXXXX")
trap 'rm -rf "$out"' EXIT
# clang 19's -march=native on Sapphire Rapids-class Xeons warns that the host's avx10.1-256 "will
# be promoted to avx10.1-512", a note about its own feature probe that -Werror would make fatal.
native=(-march=native -Wno-invalid-feature-combination)
flags=(-std=c++17 -O2 "${native[@]}" -Wall -Wextra -Werror -I "$twin")
kflags=(-std=c++17 -O3 "${native[@]}" -fPIC -fvisibility=hidden -Wall -Wextra -Werror -I "$twin")

fail() { echo "FAIL $*" >&2; exit 1; }

# --- build everything, two jobs at a time ---------------------------------------------------
jobs_list=()
add_job() { jobs_list+=("$1"); }
for t in test_memory test_copy test_vec test_matmul test_launch e2e_data; do
    add_job "$cxx ${flags[*]} $here/$t.cpp -o $out/$t -lpthread"
done
add_job "$cxx -std=c++17 -O2 -pthread -Wall -Wextra -Werror $twin/runner/runner.cpp -o $out/runner -ldl"
shim() {  # name kernel tiling n_gm dtype buffer_num
    local src="$out/$1.cpp"
    {
        echo "#include \"$root/kernels/ops/$2/$2.cpp\""
        echo '#include "twin_launch.h"'
        echo "TWIN_EXPORT_KERNEL($2, $3, $4)"
    } >"$src"
    add_job "$cxx ${kflags[*]} -DDTYPE_X=$5 -DBUFFER_NUM=$6 -c $src -o $out/$1.o && $cxx -shared $out/$1.o -o $out/$1.so -lpthread"
}
for d in float half; do
    for b in 1 2; do shim "srd_${d}_b$b" scale_relu_dropout ScaleReluDropoutTiling 3 $d $b; done
    shim "lag_$d" linear_add_gelu LinearAddGeluTiling 5 $d 2
done
printf '%s\n' "${jobs_list[@]}" | xargs -P 2 -I{} bash -c '{} 2>&1' >"$out/build.log" \
    || { cat "$out/build.log"; fail "build"; }
if [ -s "$out/build.log" ]; then cat "$out/build.log"; fail "build printed diagnostics"; fi

# --- twin semantics -----------------------------------------------------------------------
for t in test_memory test_copy test_vec test_matmul test_launch; do
    "$out/$t" || fail "$t"
done

# --- end to end: runner + variant .so + GM files -------------------------------------------
limits="196608 524288 65536 65536 131072 1024 1"
reply=$(echo ping | "$out/runner" --threads 2)
[[ $reply == '{"ok":true,"threads":2,"pid":'*',"abi":1}' ]] || fail "runner ping: $reply"
echo "PASS runner_ping"

run_case() {  # name op dtype so n_gm files...
    local name=$1 op=$2 dtype=$3 so=$4
    shift 4
    local dir="$out/data_$name"
    mkdir -p "$dir"
    read -r blocks tiling < <("$out/e2e_data" "$op-gen" "$dir" "$dtype")
    local request="run $so $blocks 1 3 5 $limits $tiling $*"
    reply=$(printf '%s\nquit\n' "${request//@/$dir/}" | "$out/runner" --threads 2)
    [[ $reply == '{"ok":true,"samples_us":['* ]] || fail "$name: $reply"
    "$out/e2e_data" "$op-check" "$dir" "$dtype" || fail "$name: wrong output"
    echo "PASS e2e_$name"
}
for d in float half; do
    size=4; [ $d = half ] && size=2
    for b in 1 2; do
        run_case "srd_${d}_b$b" srd $d "$out/srd_${d}_b$b.so" 3 @x.bin $((1003 * size)) @y.bin $((1003 * size)) - 256
    done
    run_case "lag_$d" lag $d "$out/lag_$d.so" 5 @x.bin $((70 * 40 * size)) @w.bin $((40 * 50 * size)) \
        @b.bin $((50 * size)) @out.bin $((70 * 50 * size)) - 1024
done

# A kernel error comes back as kind "kernel": the UB limit below the kernel's plan.
dir="$out/data_srd_float_b2"
read -r blocks tiling < <("$out/e2e_data" srd-gen "$dir" float)
reply=$(echo "run $out/srd_float_b2.so $blocks 0 1 1 1024 524288 65536 65536 131072 1024 1 $tiling 3 $dir/x.bin 4012 $dir/y.bin 4012 - 256" \
    | "$out/runner" --threads 2)
[[ $reply == '{"ok":false,"kind":"kernel","error":"block '*'UB overflow'* ]] || fail "kernel error: $reply"
reply=$(echo "run $out/srd_float_b2.so $blocks 0 1 1 $limits 00 3 - 4 - 4 - 4" | "$out/runner")
[[ $reply == *'"kind":"request"'*'tiling struct is 28 bytes, got 1'* ]] || fail "request error: $reply"
echo "PASS runner_errors"
