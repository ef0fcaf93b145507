-- Runs once, when the postgres container initialises an empty data directory.
-- Mirrors scripts/stack (make databases): one server, one database per service, so the
-- API and the consumer can never read each other's tables. Each service applies its own
-- migrations at start-up.
CREATE DATABASE payments;
CREATE DATABASE antifraud;
