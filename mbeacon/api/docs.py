"""The OpenAPI document (``/api/openapi.json``) and a small docs page for researchers (``/api/docs``)."""

from __future__ import annotations

from flask import Blueprint, jsonify, render_template, request

from mbeacon.api.openapi_spec import openapi_document

bp = Blueprint("docs", __name__, template_folder="templates")


@bp.get("/openapi.json")
def openapi():
    return jsonify(openapi_document(request.url_root.rstrip("/") + "/api"))


@bp.get("/docs")
def docs_page():
    return render_template("docs.html", base=request.url_root.rstrip("/") + "/api")
