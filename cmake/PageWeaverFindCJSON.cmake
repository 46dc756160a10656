# Finds cJSON (header cjson/cJSON.h, library libcjson) on CMake's usual search paths,
# CMAKE_PREFIX_PATH included (e.g. Debian packages unpacked into a folder), and defines the
# imported target PageWeaver::cjson. Sets PW_CJSON_FOUND. Used by the build (the capture
# library and the tools) and by the installed package (PageWeaver::pageweaver_capture).
if(TARGET PageWeaver::cjson)
  set(PW_CJSON_FOUND TRUE)
else()
  # A cached result whose file has gone (the package was removed since) is searched again.
  if(PW_CJSON_INCLUDE_DIR AND NOT EXISTS "${PW_CJSON_INCLUDE_DIR}/cjson/cJSON.h")
    unset(PW_CJSON_INCLUDE_DIR CACHE)
  endif()
  if(PW_CJSON_LIBRARY AND NOT EXISTS "${PW_CJSON_LIBRARY}")
    unset(PW_CJSON_LIBRARY CACHE)
  endif()
  find_path(PW_CJSON_INCLUDE_DIR cjson/cJSON.h PATHS ${PW_HEADER_HINTS} DOC "directory holding cjson/cJSON.h (libcjson-dev)")
  find_library(PW_CJSON_LIBRARY cjson PATHS ${PW_LIBRARY_HINTS} DOC "the cJSON library (libcjson-dev)")
  if(PW_CJSON_INCLUDE_DIR AND PW_CJSON_LIBRARY)
    set(PW_CJSON_FOUND TRUE)
    add_library(PageWeaver::cjson UNKNOWN IMPORTED)
    set_target_properties(PageWeaver::cjson PROPERTIES
      IMPORTED_LOCATION "${PW_CJSON_LIBRARY}"
      INTERFACE_INCLUDE_DIRECTORIES "${PW_CJSON_INCLUDE_DIR}")
  else()
    set(PW_CJSON_FOUND FALSE)
  endif()
endif()
