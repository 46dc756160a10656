/* capture_branch.cu — two parallel branches of a captured graph on the caller's one stream
 * (pw_internal.h, pw_capture_branch_t).
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

static_assert(sizeof(cudaGraphEdgeData) == 8, "pw_capture_branch_t keeps 8 bytes per edge");
static_assert(sizeof(cudaGraphNode_t) == sizeof(void *), "pw_capture_branch_t keeps nodes as pointers");

/* The capture's current dependencies into nodes / edges (at most the maximum); *capturing
 * 0 when the stream is not in an active capture, *fits 0 when there are more. */
static pw_status_t capture_dependencies(cudaStream_t stream, int *capturing, int *fits, size_t *count,
                                        void **nodes, unsigned char (*edges)[8])
{
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    const cudaGraphNode_t *deps = NULL;
    const cudaGraphEdgeData *data = NULL;
    size_t n = 0;
    const cudaError_t e = cudaStreamGetCaptureInfo(stream, &status, NULL, NULL, &deps, &data, &n);
    if (e != cudaSuccess) {
        (void)cudaGetLastError(); // not sticky: clear it so that later launch checks see their own
        return pw_fail(PW_ERROR_CUDA, "cudaStreamGetCaptureInfo: %s", cudaGetErrorString(e));
    }
    *capturing = status == cudaStreamCaptureStatusActive;
    *fits = n <= PW_CAPTURE_BRANCH_MAX_DEPS;
    *count = n;
    if (!*capturing || !*fits) return PW_SUCCESS;
    for (size_t i = 0; i < n; i++) {
        nodes[i] = (void *)deps[i];
        if (data) memcpy(edges[i], &data[i], 8);
        else memset(edges[i], 0, 8); // no edge data: default edges
    }
    return PW_SUCCESS;
}

static pw_status_t set_dependencies(cudaStream_t stream, void *const *nodes, const unsigned char (*edges)[8], size_t count,
                                    unsigned int flags)
{
    cudaGraphNode_t deps[PW_CAPTURE_BRANCH_MAX_DEPS];
    cudaGraphEdgeData data[PW_CAPTURE_BRANCH_MAX_DEPS];
    for (size_t i = 0; i < count; i++) {
        deps[i] = (cudaGraphNode_t)nodes[i];
        memcpy(&data[i], edges[i], 8);
    }
    const cudaError_t e = cudaStreamUpdateCaptureDependencies(stream, deps, data, count, flags);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return pw_fail(PW_ERROR_CUDA, "cudaStreamUpdateCaptureDependencies: %s", cudaGetErrorString(e));
    }
    return PW_SUCCESS;
}

extern "C" pw_status_t pw_capture_branch_open(pw_stream_t stream, pw_capture_branch_t *branch)
{
    memset(branch, 0, sizeof *branch);
    int capturing = 0, fits = 0;
    PW_TRY(capture_dependencies((cudaStream_t)stream, &capturing, &fits, &branch->fork_count, branch->fork_nodes,
                                branch->fork_edges));
    branch->active = capturing && fits;
    return PW_SUCCESS;
}

extern "C" pw_status_t pw_capture_branch_next(pw_stream_t stream, pw_capture_branch_t *branch)
{
    if (!branch->active) return PW_SUCCESS;
    int capturing = 0, fits = 0;
    PW_TRY(capture_dependencies((cudaStream_t)stream, &capturing, &fits, &branch->first_count, branch->first_nodes,
                                branch->first_edges));
    if (!capturing || !fits) { // the second branch follows the first in stream order
        branch->active = 0;
        return PW_SUCCESS;
    }
    return set_dependencies((cudaStream_t)stream, branch->fork_nodes, branch->fork_edges, branch->fork_count,
                            cudaStreamSetCaptureDependencies);
}

extern "C" pw_status_t pw_capture_branch_join(pw_stream_t stream, pw_capture_branch_t *branch)
{
    if (!branch->active) return PW_SUCCESS;
    branch->active = 0;
    return set_dependencies((cudaStream_t)stream, branch->first_nodes, branch->first_edges, branch->first_count,
                            cudaStreamAddCaptureDependencies);
}

extern "C" pw_status_t pw_capture_deps_get(pw_stream_t stream, pw_capture_deps_t *deps)
{
    memset(deps, 0, sizeof *deps);
    int capturing = 0, fits = 0;
    PW_TRY(capture_dependencies((cudaStream_t)stream, &capturing, &fits, &deps->count, deps->nodes, deps->edges));
    deps->active = capturing && fits;
    return PW_SUCCESS;
}

extern "C" pw_status_t pw_capture_deps_set(pw_stream_t stream, const pw_capture_deps_t *deps, int add)
{
    if (!deps->active) return pw_fail(PW_ERROR_INVALID_ARGUMENT, "pw_capture_deps_set: no saved dependency set");
    return set_dependencies((cudaStream_t)stream, deps->nodes, deps->edges, deps->count,
                            add ? cudaStreamAddCaptureDependencies : cudaStreamSetCaptureDependencies);
}
