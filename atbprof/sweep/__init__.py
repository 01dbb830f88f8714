"""`atbprof sweep`: a design space simulated point by point (spec -> points -> table, gains, plots)."""
