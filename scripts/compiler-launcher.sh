#!/bin/sh
# The compiler launcher of llama.cpp's cmake build (.cargo/config.toml): every C and C++ compile
# of llama.cpp runs through it. It does two things.
#
# 1. On x86-64, `-march=native` becomes the host's SIMD extensions that ggml itself names (its
#    GGML_SSE42 ... GGML_AVX512_BF16 options), on the baseline x86-64 target.
#    llama-cpp-sys-2 turns ggml's GGML_NATIVE (-march=native) on because the Rust code is built
#    with target-cpu=native; ggml's kernels only read those extensions, but GCC's code for the
#    rest of a `-march=native` target was measured about 3% slower at prompt processing than the
#    same kernels built with the list (docs/development.md, issue #44). The list comes from the
#    compiler's own answer for the host (`-march=native -dM -E`), so it is still the CPU of the
#    machine that builds it, with nothing to export. Other targets (ARM: -mcpu=native) pass
#    through unchanged. GEPA_LAB_MARCH_NATIVE=1 keeps `-march=native` as it is.
#    AMX is left out, even where the CPU has it: the vendored ggml's AMX kernels stopped with an
#    illegal instruction (`tileloadd` in tinygemm_kernel_amx, exit 132) at the first answer of
#    the README's run on a Xeon with AMX (2026-12-01), though a test program there ran AMX tiles
#    after the same permission request. Upstream (llama.cpp pull request 26954) says the worker
#    threads lack the permission and the tile configuration can be optimised away. Without
#    `-mamx-*` ggml uses its AVX-512 VNNI kernels, as on any AVX-512 host.
# 2. The compile goes through ccache when it is installed (scripts/setup-model.sh installs it),
#    else the compiler runs itself. GEPA_LAB_CCACHE=0 turns ccache off.

# The `-m` flags of ggml's x86 options, one per macro the compiler defines for the host.
host_simd_flags() {
    "$1" -march=native -dM -E -x c /dev/null 2>/dev/null | awk '
        $1 != "#define" { next }
        $2 == "__x86_64__" { x86 = 1 }
        $2 == "__SSE4_2__" { f["sse4.2"] = 1 }
        $2 == "__F16C__" { f["f16c"] = 1 }
        $2 == "__FMA__" { f["fma"] = 1 }
        $2 == "__BMI2__" { f["bmi2"] = 1 }
        $2 == "__AVX__" { f["avx"] = 1 }
        $2 == "__AVX2__" { f["avx2"] = 1 }
        $2 == "__AVXVNNI__" { f["avxvnni"] = 1 }
        $2 == "__AVX512F__" { f["avx512f"] = 1 }
        $2 == "__AVX512CD__" { f["avx512cd"] = 1 }
        $2 == "__AVX512VL__" { f["avx512vl"] = 1 }
        $2 == "__AVX512DQ__" { f["avx512dq"] = 1 }
        $2 == "__AVX512BW__" { f["avx512bw"] = 1 }
        $2 == "__AVX512VBMI__" { f["avx512vbmi"] = 1 }
        $2 == "__AVX512VNNI__" { f["avx512vnni"] = 1 }
        $2 == "__AVX512BF16__" { f["avx512bf16"] = 1 }
        END {
            if (!x86) exit 1
            n = split("sse4.2 f16c fma bmi2 avx avx2 avxvnni avx512f avx512cd avx512vl avx512dq avx512bw avx512vbmi avx512vnni avx512bf16", order, " ")
            for (i = 1; i <= n; i++) if (order[i] in f) printf "-m%s\n", order[i]
        }'
}

# The arguments again, with `-march=native` replaced by the host's list when the compiler ($1)
# targets x86-64 and answers; otherwise unchanged.
if [ "${GEPA_LAB_MARCH_NATIVE:-0}" != 1 ]; then
    for arg in "$@"; do
        if [ "$arg" = "-march=native" ]; then
            if flags=$(host_simd_flags "$1") && [ -n "$flags" ]; then
                compiler=$1
                shift
                for arg in "$@"; do
                    shift
                    if [ "$arg" = "-march=native" ]; then
                        # One flag a line, no spaces in any: word splitting is what is wanted.
                        # shellcheck disable=SC2086
                        set -- "$@" $flags
                    else
                        set -- "$@" "$arg"
                    fi
                done
                set -- "$compiler" "$@"
            fi
            break
        fi
    done
fi

if [ "${GEPA_LAB_CCACHE:-1}" != 0 ] && command -v ccache >/dev/null 2>&1; then
    exec ccache "$@"
fi
exec "$@"
