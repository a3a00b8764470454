"""What several test folders share: gRPC helpers, the kernel's cleanup, tools a test needs,
processes, and the runners of the CLI, the README's session and a stalled client."""
