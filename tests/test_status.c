/* Status strings, error messages and the version. */
#include <string.h>

#include "testutil.h"

static void test_status_strings(void **state)
{
    (void)state;
    assert_string_equal(pw_status_string(PW_SUCCESS), "PW_SUCCESS");
    assert_string_equal(pw_status_string(PW_ERROR_INVALID_ARGUMENT), "PW_ERROR_INVALID_ARGUMENT");
    assert_string_equal(pw_status_string((pw_status_t)1234), "PW_ERROR_UNKNOWN");
    assert_non_null(pw_last_error());
}

static void test_version(void **state)
{
    (void)state;
    assert_int_equal(pw_version_number(), PW_VERSION_NUMBER);
    assert_string_equal(pw_version_string(), "0.3.0");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_status_strings),
        cmocka_unit_test(test_version),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
