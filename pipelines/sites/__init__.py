"""The distributed PMJoin runtime: site processes running a plan's joins over Kafka (`site`) and the driver
that starts them and compares their traffic with the planner's (`driver`), run by `windjoin sites`."""
