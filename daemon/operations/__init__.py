"""Operations: the metrics server (http.py), metrics, systemd notifications and log set-up."""
