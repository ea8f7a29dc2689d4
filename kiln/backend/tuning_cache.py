"""Autotuning choices kept on disk (`<cache_dir>/<file>`), loaded once per process."""

import json
import os

from kiln import config


class TuningCache:
    """A JSON file of key -> choice; a later process starts from the choices made before."""

    def __init__(self, *parts):
        self.parts = parts  # the file's path under config.cache_dir
        self.entries = None

    def path(self):
        return os.path.join(config.cache_dir, *self.parts)

    def _load(self):
        if self.entries is None:
            try:
                with open(self.path()) as f:
                    self.entries = json.load(f)
            except (OSError, ValueError):
                self.entries = {}
        return self.entries

    def get(self, key):
        return self._load().get(key)

    def put(self, key, choice):
        entries = self._load()
        entries[key] = choice
        path = self.path()
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w") as f:
            json.dump(entries, f)
        os.replace(tmp, path)
