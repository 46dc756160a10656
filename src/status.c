/* Status strings, the thread-local error message, and version queries. */
#include <stdarg.h>
#include <stdio.h>

#include "pageweaver.h"
#include "pw_internal.h"

static _Thread_local char pw_error_message[512];

const char *pw_status_string(pw_status_t status)
{
    switch (status) {
    case PW_SUCCESS: return "PW_SUCCESS";
    case PW_ERROR_INVALID_ARGUMENT: return "PW_ERROR_INVALID_ARGUMENT";
    case PW_ERROR_UNSUPPORTED: return "PW_ERROR_UNSUPPORTED";
    case PW_ERROR_OUT_OF_MEMORY: return "PW_ERROR_OUT_OF_MEMORY";
    case PW_ERROR_INSUFFICIENT_WORKSPACE: return "PW_ERROR_INSUFFICIENT_WORKSPACE";
    case PW_ERROR_CUDA: return "PW_ERROR_CUDA";
    case PW_ERROR_NO_DEVICE: return "PW_ERROR_NO_DEVICE";
    case PW_ERROR_IO: return "PW_ERROR_IO";
    case PW_ERROR_FORMAT: return "PW_ERROR_FORMAT";
    }
    return "PW_ERROR_UNKNOWN";
}

const char *pw_last_error(void) { return pw_error_message; }

pw_status_t pw_fail(pw_status_t status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(pw_error_message, sizeof pw_error_message, fmt, ap);
    va_end(ap);
    return status;
}

void pw_clear_error(void) { pw_error_message[0] = '\0'; }

int pw_version_number(void) { return PW_VERSION_NUMBER; }

#define PW_STR2(x) #x
#define PW_STR(x) PW_STR2(x)
const char *pw_version_string(void)
{
    return PW_STR(PW_VERSION_MAJOR) "." PW_STR(PW_VERSION_MINOR) "." PW_STR(PW_VERSION_PATCH);
}
