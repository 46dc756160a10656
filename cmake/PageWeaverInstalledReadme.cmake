# pw_installed_readme(SOURCE OUTPUT): the README as installed in CMAKE_INSTALL_DOCDIR, beside
# docs/, examples/ and the CHANGELOG (CMakeLists.txt installs those). Links that resolve
# there stay; a link to include/pageweaver.h points at the installed header (relative to
# the doc folder when both install folders are relative, as GNUInstallDirs makes them);
# a link into the source tree only (bench/..., tests/...) becomes its text followed by
# "(PATH in the source repository)". Regenerated at configure time when the README changes.
function(pw_installed_readme source output)
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${source})
  file(READ ${source} text)
  if(IS_ABSOLUTE "${CMAKE_INSTALL_DOCDIR}" OR IS_ABSOLUTE "${CMAKE_INSTALL_INCLUDEDIR}")
    set(header "${CMAKE_INSTALL_FULL_INCLUDEDIR}/pageweaver.h")
  else()
    file(RELATIVE_PATH header "/r/${CMAKE_INSTALL_DOCDIR}" "/r/${CMAKE_INSTALL_INCLUDEDIR}/pageweaver.h")
  endif()
  string(REPLACE "](include/pageweaver.h)" "](${header})" text "${text}")
  # [label](bench/x) -> label (bench/x in the source repository), or `x` (in the source
  # repository) where the label is the path
  # (a label holds no bracket: an earlier unclosed "[", as in "[0, n)", must not start a
  # match, whose "[" would also make CMake's list splitting merge the later matches)
  string(REGEX MATCHALL "\\[[^][]*\\]\\((bench|tests|scripts|src)/[^)]*\\)" links "${text}")
  foreach(link IN LISTS links)
    string(REGEX REPLACE "^\\[([^][]*)\\]\\(([^)]*)\\)$" "\\1" label "${link}")
    string(REGEX REPLACE "^\\[([^][]*)\\]\\(([^)]*)\\)$" "\\2" path "${link}")
    string(REPLACE "!${link}" "${link}" text "${text}") # an image of a source-only file: its text
    if(label STREQUAL path)
      string(REPLACE "${link}" "`${path}` (in the source repository)" text "${text}")
    else()
      string(REPLACE "${link}" "${label} (`${path}` in the source repository)" text "${text}")
    endif()
  endforeach()
  file(WRITE ${output}.tmp "${text}")
  file(COPY_FILE ${output}.tmp ${output} ONLY_IF_DIFFERENT)
  file(REMOVE ${output}.tmp)
endfunction()
