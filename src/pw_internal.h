/* Internal helpers shared by the library's host and device sources (not installed). */
#ifndef PW_INTERNAL_H
#define PW_INTERNAL_H

#include "pageweaver.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Records a formatted message for pw_last_error() and returns status. */
pw_status_t pw_fail(pw_status_t status, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
void pw_clear_error(void);

/* Returns early with the status of a failing pw_ call. */
#define PW_TRY(expr)                                                                        \
    do {                                                                                    \
        pw_status_t pw_try_status_ = (expr);                                                \
        if (pw_try_status_ != PW_SUCCESS) return pw_try_status_;                            \
    } while (0)

#ifdef __cplusplus
}
#endif
#endif
