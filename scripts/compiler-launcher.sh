#!/bin/sh
# The compiler launcher of llama.cpp's cmake build (.cargo/config.toml): ccache when it is
# installed, else the compiler itself. GEPA_LAB_CCACHE=0 turns ccache off.
if [ "${GEPA_LAB_CCACHE:-1}" != 0 ] && command -v ccache >/dev/null 2>&1; then
    exec ccache "$@"
fi
exec "$@"
