"""The pool's backing files as the truth: each file's own identity (file_identity.py), the index
rebuilt from the files at start (adopt_pool.py), and which database owns the pool (owner.py)."""
