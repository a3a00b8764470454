"""The gRPC runtime the servicers run in: the asyncio server (aio_server.py), the adapter that
wraps every method handler (adapter.py) in the one call pipeline (pipeline.py: the REQUIRED
fields, required.py; the size limits, limits.py; the mount-lookup scope; the disk-full retry of
a teardown; the error mapping), the executors a call runs on (lanes.py), the body deadline
(body_deadline.py), the call's log line (rpc_log.py), the context shim (sync_context.py) and the
pool the long copies run on (copy_pool.py). api/ beside it holds the servicers, which only
translate requests and replies."""
