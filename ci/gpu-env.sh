# shellcheck shell=bash
# Register NVIDIA's OpenCL driver with the ICD loader when it is installed but no ICD vendor
# file names it (common in GPU containers: /etc/OpenCL/vendors holds only pocl.icd).
#
# It writes a vendor file for the library into a fresh temporary directory, links the vendor
# files the loader already reads next to it (a directory in OCL_ICD_VENDORS replaces
# /etc/OpenCL/vendors), exports OCL_ICD_VENDORS=<that directory> and says so on stderr.
# When a vendor file already names the library, or there is no NVIDIA library, it changes
# nothing.
#
# Use:   source ci/gpu-env.sh          (registers in the current shell)
#   or:  eval "$(bash ci/gpu-env.sh)"  (prints `export OCL_ICD_VENDORS=...` when it registers)
#
# Overrides: XPU_NVIDIA_OPENCL_LIB=<path> picks the library; XPU_ICD_SYSTEM_DIR replaces
# /etc/OpenCL/vendors and XPU_NVIDIA_OPENCL_CANDIDATES (space-separated paths) the default
# search list (both for tests).

xpu_register_nvidia_icd() {
    local system_dir="${XPU_ICD_SYSTEM_DIR:-/etc/OpenCL/vendors}"
    local candidates="${XPU_NVIDIA_OPENCL_CANDIDATES:-/usr/lib/x86_64-linux-gnu/libnvidia-opencl.so.1 /usr/lib64/libnvidia-opencl.so.1 /usr/lib/libnvidia-opencl.so.1 /usr/local/nvidia/lib64/libnvidia-opencl.so.1 /usr/local/nvidia/lib/libnvidia-opencl.so.1 /usr/local/cuda/compat/libnvidia-opencl.so.1}"
    local -a seen=()
    local f lib="" dir

    # The vendor files the loader reads now.
    if [ -n "${OCL_ICD_VENDORS:-}" ] && [ -d "$OCL_ICD_VENDORS" ]; then
        for f in "$OCL_ICD_VENDORS"/*.icd; do [ -f "$f" ] && seen+=("$f"); done
    elif [ -n "${OCL_ICD_VENDORS:-}" ] && [ -f "$OCL_ICD_VENDORS" ]; then
        seen+=("$OCL_ICD_VENDORS")
    else
        for f in "$system_dir"/*.icd; do [ -f "$f" ] && seen+=("$f"); done
    fi
    for f in "${seen[@]+"${seen[@]}"}"; do
        if grep -q 'libnvidia-opencl' "$f" 2>/dev/null; then
            echo "gpu-env: NVIDIA OpenCL is already registered by $f" >&2
            return 0
        fi
    done
    case "${OCL_ICD_FILENAMES:-}" in
        *libnvidia-opencl*)
            echo "gpu-env: NVIDIA OpenCL is already registered through OCL_ICD_FILENAMES" >&2
            return 0 ;;
    esac

    # Find the library.
    if [ -n "${XPU_NVIDIA_OPENCL_LIB:-}" ]; then
        lib="$XPU_NVIDIA_OPENCL_LIB"
    else
        if [ -z "${XPU_NVIDIA_OPENCL_CANDIDATES:-}" ]; then
            lib="$( (ldconfig -p || /sbin/ldconfig -p) 2>/dev/null \
                | awk '$1 == "libnvidia-opencl.so.1" { print $NF; exit }')" || lib=""
        fi
        if [ -z "$lib" ] || [ ! -e "$lib" ]; then
            lib=""
            for f in $candidates; do
                if [ -e "$f" ]; then lib="$f"; break; fi
            done
        fi
    fi
    if [ -z "$lib" ] || [ ! -e "$lib" ]; then
        echo "gpu-env: no NVIDIA OpenCL library (libnvidia-opencl.so.1) found; ICD vendors left as they are" >&2
        return 0
    fi

    dir="$(mktemp -d "${TMPDIR:-/tmp}/xpu-icd.XXXXXX")" || {
        echo "gpu-env: cannot create a temporary directory for the vendor file" >&2
        return 1
    }
    for f in "${seen[@]+"${seen[@]}"}"; do
        ln -s "$(readlink -f "$f" 2>/dev/null || echo "$f")" "$dir/$(basename "$f")"
    done
    printf '%s\n' "$lib" > "$dir/xpu-nvidia.icd"
    export OCL_ICD_VENDORS="$dir"
    echo "gpu-env: registered NVIDIA OpenCL library $lib (no ICD vendor file named it): OCL_ICD_VENDORS=$dir, with ${#seen[@]} existing vendor file(s) linked" >&2
}

if (return 0 2>/dev/null); then
    xpu_register_nvidia_icd
else
    set -euo pipefail
    before="${OCL_ICD_VENDORS:-}"
    xpu_register_nvidia_icd
    if [ "${OCL_ICD_VENDORS:-}" != "$before" ]; then
        printf "export OCL_ICD_VENDORS='%s'\n" "${OCL_ICD_VENDORS//\'/\'\\\'\'}"
    fi
fi
