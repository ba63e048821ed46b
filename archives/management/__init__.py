"""The `manage.py` commands (`commands/`), and what the larger ones read: `importing`
(a file of records for `import_records`) and `csvcolumns` (how it reads a CSV file's header
and cells)."""
