/* Review h90: an OpenCL loader layer (ocl-icd's OPENCL_LAYERS) whose clFinish returns
 * CL_OUT_OF_RESOURCES (-5) at once, without calling the driver, when the file named by
 * $H90_FAIL_FINISH_FLAG exists (it is removed: one such return per file); every other call,
 * and clFinish otherwise, goes to the driver. It models a driver that returns a clFinish
 * error without waiting (CommandQueue::finish's docs allow for one). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef int32_t cl_int;
typedef uint32_t cl_uint;
typedef cl_uint cl_layer_info;
typedef cl_uint cl_layer_api_version;
typedef void *cl_command_queue;
typedef cl_int (*finish_fn)(cl_command_queue);

#define CL_LAYER_API_VERSION 0x4240
#define CL_LAYER_API_VERSION_100 100
#define FINISH_INDEX 47 /* clFinish in cl_icd_dispatch */
#define MAX_ENTRIES 512

static void *table[MAX_ENTRIES];
static finish_fn next_finish;

static cl_int layer_finish(cl_command_queue q) {
    const char *flag = getenv("H90_FAIL_FINISH_FLAG");
    if (flag && unlink(flag) == 0) {
        return -5;
    }
    return next_finish(q);
}

cl_int clGetLayerInfo(cl_layer_info name, size_t size, void *value, size_t *size_ret) {
    if (name != CL_LAYER_API_VERSION) {
        return -30; /* CL_INVALID_VALUE */
    }
    if (value) {
        if (size < sizeof(cl_layer_api_version)) {
            return -30;
        }
        *(cl_layer_api_version *)value = CL_LAYER_API_VERSION_100;
    }
    if (size_ret) {
        *size_ret = sizeof(cl_layer_api_version);
    }
    return 0;
}

cl_int clInitLayer(cl_uint num_entries, const void *target, cl_uint *num_entries_ret,
                   const void **layer_dispatch_ret) {
    if (num_entries > MAX_ENTRIES || num_entries <= FINISH_INDEX || !target ||
        !num_entries_ret || !layer_dispatch_ret) {
        return -30;
    }
    memcpy(table, target, num_entries * sizeof(void *));
    next_finish = (finish_fn)table[FINISH_INDEX];
    table[FINISH_INDEX] = (void *)layer_finish;
    *num_entries_ret = num_entries;
    *layer_dispatch_ret = table;
    return 0;
}
