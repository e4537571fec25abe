"""The data root, resolved as genesis and data/fetch.sh resolve ${GENESIS_DATA}: $GENESIS_DATA,
else $GENESIS_CACHE_DIR/data, else $XDG_CACHE_HOME/genesis/data, else ~/.cache/genesis/data.
The scripts beside this file write their datasets there by default."""
import os


def data_root():
    def env(name):
        return os.environ.get(name) or None

    if env("GENESIS_DATA"):
        return env("GENESIS_DATA")
    cache = env("GENESIS_CACHE_DIR") or os.path.join(
        env("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "genesis")
    return os.path.join(cache, "data")
