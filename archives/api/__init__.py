"""The producer API (Django REST framework): thin views over `archives.log.publishing`."""
