"""The package version, at the bottom so that plans and manifests can record it."""

VERSION = "0.1.0"
