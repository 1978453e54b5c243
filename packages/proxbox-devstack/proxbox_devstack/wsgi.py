"""NetBox's WSGI application with its static files served alongside.

NetBox expects a web server in front of gunicorn to serve `/static/`; the dev
stack has none, so Django's static-files handler answers those paths straight
from the installed packages (no collectstatic step) and passes everything
else to NetBox. Development use only.
"""

from django.contrib.staticfiles.handlers import StaticFilesHandler
from netbox.wsgi import application as netbox_application

application = StaticFilesHandler(netbox_application)
