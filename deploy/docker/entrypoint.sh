#!/bin/sh
# The fuseserve image's entrypoint.
#
#   (no arguments) or --flag ...  serve MODEL_REPOSITORY (default /models),
#                                 the flags going to fuseserve; when the
#                                 repository is empty (a fresh volume), the
#                                 default repository is written into it first
#   COMMAND ...                   run COMMAND instead, e.g. fuseserve-cli health
#
# FUSESERVE_DEFAULT_REPOSITORY=small writes the tiny test-size models instead
# of the reference sizes (full, the default), e.g. for a CPU-only try-out.
# fuseserve is exec'ed, so it receives `docker stop`'s SIGTERM and drains.
set -eu

case "${1:-}" in
  "" | -*) ;;
  *) exec "$@" ;;
esac

repository=${MODEL_REPOSITORY:-/models}

case "${FUSESERVE_DEFAULT_REPOSITORY:-full}" in
  full) size_flag="" ;;
  small) size_flag="--small" ;;
  *)
    echo "fuseserve-entrypoint: FUSESERVE_DEFAULT_REPOSITORY must be full or small," \
         "got '${FUSESERVE_DEFAULT_REPOSITORY}'" >&2
    exit 2
    ;;
esac

# lost+found alone (a freshly formatted volume) counts as empty.
if [ -z "$(find "$repository" -mindepth 1 -maxdepth 1 ! -name lost+found 2>/dev/null | head -n 1)" ]; then
  if ! mkdir -p "$repository" 2>/dev/null || [ ! -w "$repository" ]; then
    echo "fuseserve-entrypoint: $repository is empty and not writable by uid $(id -u);" \
         "mount a model repository there, or a volume this user can write" >&2
    exit 1
  fi
  echo "fuseserve-entrypoint: $repository is empty; writing the default model repository" >&2
  # shellcheck disable=SC2086  # size_flag is empty or one word
  fuseserve-cli make-repository "$repository" $size_flag
fi

exec fuseserve --model-repository="$repository" "$@"
