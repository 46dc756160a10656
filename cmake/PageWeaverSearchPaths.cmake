# Where the build looks for its third-party libraries (cJSON, cmocka), besides CMake's
# defaults and CMAKE_PREFIX_PATH (cache or environment):
#  - <repository>/.deps/usr: Debian packages unpacked there by scripts/fetch-device-deps
#    (the GPU machine has no apt and no network; the folder travels with the tree);
#  - the compiler's environment: CPATH / C_INCLUDE_PATH for headers, LIBRARY_PATH for
#    libraries, so that what the compiler would find, the build finds too.
# Included by CMakeLists.txt and by scripts/deps-probe (scripts/setup-deps), so that the
# README's commands decide what is missing exactly as the build does.
list(APPEND CMAKE_PREFIX_PATH ${CMAKE_CURRENT_LIST_DIR}/../.deps/usr)
set(PW_HEADER_HINTS)
foreach(var CPATH C_INCLUDE_PATH)
  if(DEFINED ENV{${var}})
    string(REPLACE ":" ";" dirs "$ENV{${var}}")
    list(APPEND PW_HEADER_HINTS ${dirs})
  endif()
endforeach()
set(PW_LIBRARY_HINTS)
if(DEFINED ENV{LIBRARY_PATH})
  string(REPLACE ":" ";" PW_LIBRARY_HINTS "$ENV{LIBRARY_PATH}")
endif()
