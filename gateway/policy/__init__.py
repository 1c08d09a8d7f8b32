"""Slurm's accounting policy on Caldera: associations, QOS, fair share, multifactor priority.

Pure functions over typed values (`fairshare`, `priority`, `sacctmgr_*`, `sshare`, `sprio`);
the store and the API are the only IO (`gateway/store/policy_store.py`,
`gateway/api/policy_routes.py`).
"""
