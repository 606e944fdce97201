"""`modelci report --out DIR`: write the static dashboard (index, workload pages, run pages) for the history."""

from __future__ import annotations

from modelci.commands import EXIT_OK, Once, count


def add_parser(sub) -> None:
    """Declare the command."""
    parser = sub.add_parser("report", help="write the dashboard: a static site that opens from file://")
    parser.add_argument("--out", action=Once, required=True, metavar="DIR", help="folder to write the site into")
    parser.add_argument("--overlay", type=count, default=10, metavar="N",
                        help="loss curves of the last N targets overlaid on each workload page (default 10)")
    parser.add_argument("--recent", type=count, default=30, metavar="N", help="runs listed on the index (default 30)")
    parser.add_argument("--full", action="store_true", help="write every run page again, even those unchanged")


def main(args, cfg) -> int:
    """Generate the site and say where its index is."""
    from modelci.report import console as views
    from modelci.report.site import generate_site, plotly_js
    from modelci.store import Store

    plotly_js()  # the missing extra is the first thing to say: without it there is no report to write
    report = generate_site(Store.from_config(cfg, create=False), args.out, overlay=args.overlay, recent=args.recent,
                           full=args.full)
    out = views.console()
    kept = f", {report.kept_pages} run pages unchanged" if report.kept_pages else ""
    out.print(f"wrote {report.pages} pages in {report.seconds:.1f} s (largest {report.largest_page}, "
              f"{report.largest_bytes / 1024:.0f} KiB{kept})", markup=False, highlight=False)
    out.print(f"open {(report.out / 'index.html').resolve().as_uri()}", markup=False, highlight=False)
    return EXIT_OK
