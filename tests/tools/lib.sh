# Shell functions the tools share; sourced, not run.

# A TCP port free on 127.0.0.1 now (the kernel picks it; the caller binds it soon after).
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
