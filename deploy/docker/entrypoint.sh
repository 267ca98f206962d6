#!/bin/sh
# Keys come only from the environment or from mounted secrets: NAME_FILE=/run/secrets/x sets NAME
# to the file's content (compose `secrets:`, Kubernetes secret volumes), so no key is baked into
# the image or passed on a command line.
set -eu
for name in $(env | sed -n 's/^\([A-Za-z_][A-Za-z0-9_]*\)_FILE=.*/\1/p'); do
    file=$(printenv "${name}_FILE")
    if [ ! -r "$file" ]; then
        echo "ragpulse: ${name}_FILE points to $file, which cannot be read" >&2
        exit 2
    fi
    value=$(cat "$file")
    export "$name=$value"
    unset "${name}_FILE"
done
exec ragpulse "$@"
