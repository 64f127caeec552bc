# Shell functions the tools share; sourced, not run.

# A TCP port free on 127.0.0.1 now, which the caller binds soon after. It is below the kernel's ephemeral range, so a
# client connection cannot take it meanwhile, and apart from the test binaries' ports (20000-31999). This shell never
# hands one out twice: two bind(0) probes in a row may return the same port. `$$` is the script's pid in `$(...)` too.
free_port() {
  python3 - "${TMPDIR:-/tmp}/capi-ipam-ports.$$" <<'PY'
import os, random, socket, sys
taken_file = sys.argv[1]
taken = set(open(taken_file).read().split()) if os.path.exists(taken_file) else set()
for port in random.sample(range(12000, 20000), 8000):
    if str(port) in taken:
        continue
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", port))
    except OSError:
        continue
    finally:
        s.close()
    with open(taken_file, "a") as f:
        f.write(f"{port}\n")
    print(port)
    break
else:
    sys.exit("no free port in 12000-19999")
PY
}
