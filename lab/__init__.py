"""The gpuops lab: real systemd machines booted with systemd-nspawn, for tests and the demo."""
