"""The job checks and job tools: what a job folder becomes on a cluster and what admission makes of
it (preview), the trainer's arguments (trainerargs), whether its pods fit the nodes and the quota
(placement), and ``trainyard new-job`` (newjob). Imports the rooms below it."""
