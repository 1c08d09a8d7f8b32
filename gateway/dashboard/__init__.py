"""The web dashboard: queue, jobs, clusters, a chart, the routing decision log, the
fair-share tree and a topology map, served by the gateway (issue 15).

`routes.dashboard_router` is included in the API on the Unix socket;
`tcp.start_dashboard_tcp` adds the optional TCP listener (token-authenticated) when
caldera.toml's `[dashboard] listen` is set. Nothing is imported here, so that the API can
import the routes without pulling in the TCP side (which imports the API).
"""
