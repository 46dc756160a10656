# Finds cmocka (header cmocka.h, library libcmocka), the tests' framework, on CMake's usual
# search paths plus those of cmake/PageWeaverSearchPaths.cmake, and defines the imported
# target PageWeaver::cmocka. Sets PW_CMOCKA_FOUND.
if(TARGET PageWeaver::cmocka)
  set(PW_CMOCKA_FOUND TRUE)
else()
  # A cached result whose file has gone (the package was removed since) is searched again.
  if(PW_CMOCKA_INCLUDE_DIR AND NOT EXISTS "${PW_CMOCKA_INCLUDE_DIR}/cmocka.h")
    unset(PW_CMOCKA_INCLUDE_DIR CACHE)
  endif()
  if(PW_CMOCKA_LIBRARY AND NOT EXISTS "${PW_CMOCKA_LIBRARY}")
    unset(PW_CMOCKA_LIBRARY CACHE)
  endif()
  find_path(PW_CMOCKA_INCLUDE_DIR cmocka.h PATHS ${PW_HEADER_HINTS} DOC "directory holding cmocka.h (libcmocka-dev)")
  find_library(PW_CMOCKA_LIBRARY cmocka PATHS ${PW_LIBRARY_HINTS} DOC "the cmocka library (libcmocka-dev)")
  if(PW_CMOCKA_INCLUDE_DIR AND PW_CMOCKA_LIBRARY)
    set(PW_CMOCKA_FOUND TRUE)
    add_library(PageWeaver::cmocka UNKNOWN IMPORTED)
    set_target_properties(PageWeaver::cmocka PROPERTIES
      IMPORTED_LOCATION "${PW_CMOCKA_LIBRARY}"
      INTERFACE_INCLUDE_DIRECTORIES "${PW_CMOCKA_INCLUDE_DIR}")
  else()
    set(PW_CMOCKA_FOUND FALSE)
  endif()
endif()
