"""`modelci serve [--host 127.0.0.1] [--port N]`: serve the dashboard, rebuilt after each new run."""

from __future__ import annotations

from modelci.commands import EXIT_OK, Once, count, port


def add_parser(sub) -> None:
    """Declare the command."""
    parser = sub.add_parser("serve", help="serve the dashboard over HTTP; it refreshes after new runs")
    parser.add_argument("--host", action=Once, default="127.0.0.1",
                        help="address to bind (default 127.0.0.1: this machine only; 0.0.0.0 opens it to the network)")
    parser.add_argument("--port", action=Once, type=port, default=8000, help="port (default 8000; 0 picks a free one)")
    parser.add_argument("--out", action=Once, metavar="DIR",
                        help="keep the site in DIR (default: a temporary folder, removed on exit)")
    parser.add_argument("--overlay", type=count, default=10, metavar="N", help="loss curves overlaid per workload")
    parser.add_argument("--verbose", action="store_true", help="log every request")


def main(args, cfg) -> int:
    """Build the site, print its address, serve until Ctrl-C or SIGTERM."""
    import signal

    from modelci.report import server as dashboard
    from modelci.store import Store

    def say(text: str) -> None:
        print(text, flush=True)

    httpd = dashboard.make_server(Store.from_config(cfg), args.host, args.port, args.out, log=say,
                                  verbose=args.verbose, overlay=args.overlay)
    if not dashboard.is_loopback(args.host):
        where = args.host if args.host.strip() else "every interface (an empty --host)"
        say(f"warning: serving on {where}: anyone who can reach this machine can read the history")
    say(f"serving the dashboard at {httpd.url} (Ctrl-C stops)")

    def stop(_signum, _frame):
        raise KeyboardInterrupt

    # a service manager or a test stops the server with SIGTERM: shut down as cleanly as on Ctrl-C
    signal.signal(signal.SIGTERM, stop)
    try:
        dashboard.serve_forever(httpd, cleanup=args.out is None)
    except KeyboardInterrupt:
        say("stopped")
    return EXIT_OK
