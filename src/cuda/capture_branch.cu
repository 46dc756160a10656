/* capture_branch.cu — a captured stream's dependency set saved and restored
 * (pw_capture_deps_t), and with it two parallel branches of a captured graph on the
 * caller's one stream (pw_internal.h, pw_capture_branch_t).
 *
 * The full call's V^T pre-pass reads only the Top-K ids and the request layout, not the
 * regroup's permutation or union preparation's metadata, so in a graph the two chains can
 * run side by side and the attention kernel waits for both (bench/NOTES.md, "the pre-pass
 * beside the regroup"). Under stream capture this needs no stream or event of the
 * library's: the capture's dependency set is read (cudaStreamGetCaptureInfo) and set
 * (cudaStreamUpdateCaptureDependencies) around the first branch. Outside capture nothing
 * changes: the kernels run in stream order.
 */
#include <cuda_runtime.h>
#include <string.h>

#include "pw_internal.h"

static_assert(sizeof(cudaGraphEdgeData) == 8, "pw_capture_deps_t keeps 8 bytes per edge");
static_assert(sizeof(cudaGraphNode_t) == sizeof(void *), "pw_capture_deps_t keeps nodes as pointers");

extern "C" pw_status_t pw_capture_deps_get(pw_stream_t stream, pw_capture_deps_t *saved)
{
    memset(saved, 0, sizeof *saved);
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    const cudaGraphNode_t *deps = NULL;
    const cudaGraphEdgeData *data = NULL;
    size_t n = 0;
    const cudaError_t e = cudaStreamGetCaptureInfo((cudaStream_t)stream, &status, NULL, NULL, &deps, &data, &n);
    if (e != cudaSuccess) {
        (void)cudaGetLastError(); // not sticky: clear it so that later launch checks see their own
        return pw_fail(PW_ERROR_CUDA, "cudaStreamGetCaptureInfo: %s", cudaGetErrorString(e));
    }
    // Not capturing, or more nodes than the set holds: inactive (the caller keeps stream order).
    if (status != cudaStreamCaptureStatusActive || n > PW_CAPTURE_BRANCH_MAX_DEPS) return PW_SUCCESS;
    saved->active = 1;
    saved->count = n;
    for (size_t i = 0; i < n; i++) {
        saved->nodes[i] = (void *)deps[i];
        if (data) memcpy(saved->edges[i], &data[i], 8);
        else memset(saved->edges[i], 0, 8); // no edge data: default edges
    }
    return PW_SUCCESS;
}

extern "C" pw_status_t pw_capture_deps_set(pw_stream_t stream, const pw_capture_deps_t *saved, int add)
{
    if (!saved->active) return pw_fail(PW_ERROR_INVALID_ARGUMENT, "pw_capture_deps_set: no saved dependency set");
    cudaGraphNode_t deps[PW_CAPTURE_BRANCH_MAX_DEPS];
    cudaGraphEdgeData data[PW_CAPTURE_BRANCH_MAX_DEPS];
    for (size_t i = 0; i < saved->count; i++) {
        deps[i] = (cudaGraphNode_t)saved->nodes[i];
        memcpy(&data[i], saved->edges[i], 8);
    }
    const cudaError_t e = cudaStreamUpdateCaptureDependencies(
        (cudaStream_t)stream, deps, data, saved->count,
        add ? cudaStreamAddCaptureDependencies : cudaStreamSetCaptureDependencies);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return pw_fail(PW_ERROR_CUDA, "cudaStreamUpdateCaptureDependencies: %s", cudaGetErrorString(e));
    }
    return PW_SUCCESS;
}

extern "C" pw_status_t pw_capture_branch_open(pw_stream_t stream, pw_capture_branch_t *branch)
{
    memset(branch, 0, sizeof *branch);
    PW_TRY(pw_capture_deps_get(stream, &branch->fork));
    branch->active = branch->fork.active;
    return PW_SUCCESS;
}

extern "C" pw_status_t pw_capture_branch_next(pw_stream_t stream, pw_capture_branch_t *branch)
{
    if (!branch->active) return PW_SUCCESS;
    PW_TRY(pw_capture_deps_get(stream, &branch->first));
    if (!branch->first.active) { // the second branch follows the first in stream order
        branch->active = 0;
        return PW_SUCCESS;
    }
    return pw_capture_deps_set(stream, &branch->fork, 0);
}

extern "C" pw_status_t pw_capture_branch_join(pw_stream_t stream, pw_capture_branch_t *branch)
{
    if (!branch->active) return PW_SUCCESS;
    branch->active = 0;
    return pw_capture_deps_set(stream, &branch->first, 1);
}
