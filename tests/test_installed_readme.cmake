# cmake -DPW_SRC=<repository> -DWORK=<scratch folder> -P tests/test_installed_readme.cmake
# cmake/PageWeaverInstalledReadme.cmake on a README with the cases that broke it or could:
# an unclosed "[" before a link (a review, 2026-12-06: it stopped every later rewrite), an
# image, a label equal to its path, semicolons, the header link, links that must stay.
set(CMAKE_INSTALL_DOCDIR "share/doc/pageweaver")
set(CMAKE_INSTALL_INCLUDEDIR "include")
include(${PW_SRC}/cmake/PageWeaverInstalledReadme.cmake)
file(MAKE_DIRECTORY ${WORK})
file(WRITE ${WORK}/in.md [=[
Ids in [0, num_cache_pages) are read ([notes](bench/NOTES.md)); a; b [x] y.
Later [tests/fuzz/README.md](tests/fuzz/README.md) and ![chart](bench/chart.png).
The API: [include/pageweaver.h](include/pageweaver.h); kept: [docs](docs/bench.md), [web](https://x.y/bench/a).
]=])
pw_installed_readme(${WORK}/in.md ${WORK}/out.md)
file(READ ${WORK}/out.md got)
set(want [=[
Ids in [0, num_cache_pages) are read (notes (`bench/NOTES.md` in the source repository)); a; b [x] y.
Later `tests/fuzz/README.md` (in the source repository) and chart (`bench/chart.png` in the source repository).
The API: [include/pageweaver.h](../../../include/pageweaver.h); kept: [docs](docs/bench.md), [web](https://x.y/bench/a).
]=])
if(NOT got STREQUAL want)
  message(FATAL_ERROR "installed README rewrite:\n--- got\n${got}--- want\n${want}")
endif()
message(STATUS "installed README rewrite: ok")
