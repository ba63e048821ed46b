"""The pages for people: HTML renderings of feeds, archive pages, records and search, and
the activity chart. Documents like the feeds they stand beside; may use documents and below.
"""
