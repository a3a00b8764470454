"""The images the project's clusters run (tools/cluster/images.sh): their names offline, and
built and run in a throwaway containerd for real."""
