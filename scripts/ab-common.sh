# Shared by scripts/ab-shapes and scripts/ab-bench (sourced, not run).
# ab_dir SPEC NAME: the folder holding SPEC's programs: SPEC itself if it is a folder, else
# the scripts/prebuild tarball SPEC unpacked to /tmp/ab-NAME.
ab_dir() {
  if [ -d "$1" ]; then echo "$1"; return; fi
  rm -rf "/tmp/ab-$2" && mkdir -p "/tmp/ab-$2" && xz -dc "$1" | tar -C "/tmp/ab-$2" -xf - && echo "/tmp/ab-$2"
}
# ab_stamp DIR: the build's commit line (scripts/prebuild's PREBUILT), or "built here".
ab_stamp() { head -1 "$1/PREBUILT" 2>/dev/null || echo "built here"; }
